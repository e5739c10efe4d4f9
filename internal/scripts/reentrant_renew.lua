-- reentrant_renew.lua: renew the lease of a reentrant mutex's hold, and tell the head of the
-- queue when it now ends. The handle's renewal loop sends it for every reentrant hold, as it
-- sends mutex_renew.lua for a mutex's.
--
-- KEYS[1] lock   KEYS[2] q   KEYS[3] qx   (as in reentrant_lock.lua)
-- ARGV[1] field  'o:'..owner, the holder's field
-- ARGV[2] ttl    lease in ms, counted from now on the server's clock
-- ARGV[3] token  the hold's token, in field 't' (a hold that lapsed and was made again under
--                the same owner is another hold)
-- ARGV[4] prefix channel prefix; waiter w listens on prefix..':'..w
-- ARGV[5] pub    'PUBLISH' or 'SPUBLISH'
-- Reply: 1 renewed; 0 the hold is gone, or is another hold
--
-- The lease is made to last at least ttl more, never shortened (processes that share an owner
-- renew the same hold, and may have different leases), as extend.lua does for kind 'h'. Then
-- the head of the queue is told when the lease now ends (lib/renew.lua: 'x <pttl> <waiter>'):
-- a holder that died renews no more, and the head takes the mutex within a round trip of its
-- expiry.

-- #include lib/clock.lua

local lock = KEYS[1]
if redis.call('HEXISTS', lock, ARGV[1]) == 0 or redis.call('HGET', lock, 't') ~= ARGV[3] then
  return 0
end
if not live_for(lock, tonumber(ARGV[2])) then
  return 0 -- expired in the script (miniredis only: lib/clock.lua)
end
if redis.call('EXISTS', KEYS[2]) == 0 then
  return 1 -- nobody waits
end

-- #include lib/renew.lua

tell_head(KEYS[2], KEYS[3], ARGV[4], ARGV[5], redis.call('PTTL', lock))
return 1
