-- mutex_leave.lua: clean up after a waiter that gave up (its context ended).
--
-- KEYS[1] lock   KEYS[2] fence   KEYS[3] q   KEYS[4] qx   (as in mutex_acquire.lua)
-- ARGV[1] waiter     waiter id to take out of the queue; '' when other goroutines of the same
--                    process still wait (they keep the entry)
-- ARGV[2] owner      value of an acquisition the caller will not use: an attempt whose reply it
--                    did not wait for, or a grant ('~...') that found nobody waiting; ''
-- ARGV[3] window     ms a grant passed on here lasts unless confirmed
-- ARGV[4] fence_ttl  ms the fence key outlives the last acquisition
-- ARGV[5] prefix     channel prefix; waiter w listens on prefix..':'..w
-- ARGV[6] pub        'PUBLISH' or 'SPUBLISH'
-- ARGV[7] void_ttl   ms to remember a voided attempt, longer than any command stays in flight
-- Reply: 1 if the lock was passed on, else 0
--
-- Cancelling a context does not cancel a command Redis already received, and rueidis may send
-- the attempt and this script on different connections, so either may run first. If the
-- attempt ran first and took the lock, pass it on. If not, void the attempt so that it fails
-- when it arrives. A grant is passed on only by its exact owner value: a grant to this waiter
-- id may be held by another goroutine of the same process, which took it without a round trip.

-- #include lib/clock.lua
-- #include lib/fence.lua
-- #include lib/queue.lua

local lock, fence, q, qx = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local waiter, owner = ARGV[1], ARGV[2]
if waiter ~= '' and redis.call('ZREM', q, waiter) == 1 then
  redis.call('ZREM', qx, waiter)
end
if owner == '' then
  return 0
end
if redis.call('GET', lock) == owner then
  pass_on(lock, fence, q, qx, ARGV[3], ARGV[4], ARGV[5], ARGV[6])
  return 1
end
if string.sub(owner, 1, 1) ~= '~' then
  -- Void the attempt. (A grant is made by a release, never in flight: nothing to void.)
  local void_ttl = tonumber(ARGV[7])
  redis.call('ZADD', qx, now() + void_ttl, '!' .. owner)
  live_for(qx, void_ttl)
end
return 0
