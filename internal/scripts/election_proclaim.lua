-- election_proclaim.lua: change the leader's value, without changing the leader.
--
-- KEYS[1] lock    KEYS[2] values   (as in election_leader.lua)
-- ARGV[1] owner      the term's owner value
-- ARGV[2] waiter     the leader's waiter id
-- ARGV[3] term       the term's fencing token
-- ARGV[4] value      the new value
-- ARGV[5] observers  the observers' channel
-- ARGV[6] ttl        the lease in ms
-- ARGV[7] pub        'PUBLISH' or 'SPUBLISH'
-- Reply: 1 the value is changed and announced; 0 the term is over (the lock is not owner's)

-- #include lib/clock.lua
-- #include lib/fence.lua
-- #include lib/queue.lua

if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
local rec = {values = KEYS[2], channel = ARGV[5], live = tonumber(ARGV[6])}
-- A leader whose term is not recorded yet (its Campaign could not send election_renew.lua,
-- which the renewal loop then sends) is announced first, with the value it campaigned with:
-- observers see every value in order.
crown(rec, ARGV[7], KEYS[1], ARGV[2], ARGV[3])
redis.call('HSET', KEYS[2], ARGV[2], ARGV[4])
announce(rec, ARGV[7], KEYS[1], ARGV[2], ARGV[3])
return 1
