-- mutex_leave.lua: clean up after a waiter that gave up (its context ended).
--
-- KEYS[1] lock   KEYS[2] q   KEYS[3] qx   (as in mutex_acquire.lua)
-- ARGV[1] waiter   waiter id to take out of the queue; '' when other goroutines of the same
--                  process still wait (they keep the entry, and any reservation for it)
-- ARGV[2] owner    value of an acquire attempt whose reply the caller did not wait for; ''
-- ARGV[3] window   ms the next waiter has to claim a reservation passed on here
-- ARGV[4] prefix   channel prefix; waiter w listens on prefix..':'..w
-- ARGV[5] pub      'PUBLISH' or 'SPUBLISH'
-- ARGV[6] void_ttl ms to remember a voided attempt, longer than any command stays in flight
-- Reply: 1 if a lock or reservation was passed on, else 0
--
-- Cancelling a context does not cancel a command Redis already received, and rueidis may send
-- the attempt and this script on different connections, so either may run first. If the
-- attempt ran first and took the lock (or a reservation is waiting for this waiter), pass it
-- on. If not, void the attempt so that it fails when it arrives.

-- #include lib/clock.lua
-- #include lib/queue.lua

local lock, q, qx = KEYS[1], KEYS[2], KEYS[3]
local waiter, owner = ARGV[1], ARGV[2]
if waiter ~= '' and redis.call('ZREM', q, waiter) == 1 then
  redis.call('ZREM', qx, waiter)
end
local cur = redis.call('GET', lock)
if cur and ((owner ~= '' and cur == owner) or (waiter ~= '' and cur == '~' .. waiter)) then
  pass_on(lock, q, qx, ARGV[3], ARGV[4], ARGV[5])
  return 1
end
if owner ~= '' then
  -- Void the attempt.
  local void_ttl = tonumber(ARGV[6])
  redis.call('ZADD', qx, now() + void_ttl, '!' .. owner)
  live_for(qx, void_ttl)
end
return 0
