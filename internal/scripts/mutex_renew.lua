-- mutex_renew.lua: renew the lease of a lock's holder, and tell the head of the queue. The
-- handle's renewal loop sends it instead of extend.lua for every hold of a mutex and a fair
-- lock (an election's is election_renew.lua).
--
-- KEYS[1] lock   the lock (as in mutex_acquire.lua, fair_acquire.lua)
-- KEYS[2] q      the queue: waiter id -> arrival (µs)
-- KEYS[3] qx     waiter id -> entry deadline (ms)
-- KEYS[4..] keep keys that live as long as the hold: made to live ttl more if it is renewed
-- ARGV[1] owner  the holder's owner value
-- ARGV[2] ttl    new lease in ms, counted from now on the server's clock
-- ARGV[3] prefix channel prefix; waiter w listens on prefix..':'..<w up to its '/'>
-- ARGV[4] pub    'PUBLISH' or 'SPUBLISH'
-- Reply: 1 renewed; 0 the lock is gone or belongs to someone else
--
-- 'x <ttl> <waiter>' tells the head of the queue when the lease now ends (lib/renew.lua).

-- #include lib/clock.lua
-- #include lib/renew.lua

-- PEXPIRE finds no key only on miniredis, which expires keys between a script's commands
-- (extend.lua): the lease is gone, not renewed.
-- A mutex holder's value may have a '+' after it: waited for (lib/queue.lua).
local cur = redis.call('GET', KEYS[1])
if cur ~= ARGV[1] and cur ~= ARGV[1] .. '+' or redis.call('PEXPIRE', KEYS[1], ARGV[2]) == 0 then
  return 0
end
for i = 4, #KEYS do
  live_for(KEYS[i], tonumber(ARGV[2]))
end
tell_head(KEYS[2], KEYS[3], ARGV[3], ARGV[4], ARGV[2])
return 1
