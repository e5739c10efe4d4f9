-- mutex_renew.lua: renew a mutex holder's lease, and tell the head of the queue. The handle's
-- renewal loop sends it instead of extend.lua for every mutex hold.
--
-- KEYS[1] lock   the mutex (as in mutex_acquire.lua)
-- KEYS[2] q      the queue of waiting processes: waiter id -> arrival (µs)
-- ARGV[1] owner  the holder's owner value
-- ARGV[2] ttl    new lease in ms, counted from now on the server's clock
-- ARGV[3] prefix channel prefix; waiter w listens on prefix..':'..w
-- ARGV[4] pub    'PUBLISH' or 'SPUBLISH'
-- Reply: 1 renewed; 0 the lock is gone or belongs to someone else
--
-- 'x <ttl> <waiter>' tells the first waiting process that the lease it waits behind now ends
-- in ttl ms: it re-checks just after that, and not before, unless a message comes. So a head
-- waiter sends nothing while the holder lives, and finds the lock of a holder that died
-- within a round trip of its expiry, instead of up to a third of a lease later (the slack an
-- uninformed waiter must add to stay at one re-check per lease, see core.Backstop).

if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
local head = redis.call('ZRANGE', KEYS[2], 0, 0)[1]
if head then
  redis.call(ARGV[4], ARGV[3] .. ':' .. head, 'x ' .. ARGV[2] .. ' ' .. head)
end
return 1
