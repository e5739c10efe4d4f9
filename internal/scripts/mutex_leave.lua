-- mutex_leave.lua: clean up after a waiter that gave up (its context ended).
--
-- KEYS[1] lock   KEYS[2] fence   KEYS[3] q   KEYS[4] qx   (as in mutex_acquire.lua)
-- ARGV[1] waiter     waiter id whose process has no goroutine waiting any more: take it out of
--                    the queue, and pass on a grant made to it that none of its goroutines took;
--                    '' when other goroutines of the same process still wait (they keep the
--                    entry, and take the grant)
-- ARGV[2] owner      value of an acquisition the caller will not use: an attempt whose reply it
--                    did not wait for; ''
-- ARGV[3] window     ms a grant passed on here lasts unless confirmed
-- ARGV[4] fence_ttl  ms the fence key outlives the last acquisition
-- ARGV[5] prefix     channel prefix; waiter w listens on prefix..':'..w
-- ARGV[6] pub        'PUBLISH' or 'SPUBLISH'
-- ARGV[7] void_ttl   ms to remember a voided attempt, longer than any command stays in flight
-- ARGV[8] last       the largest token the waiter's process acquired: a grant with a token up
--                    to it was taken by one of its goroutines, which holds it
-- Reply: {passed, token}: passed is 1 if the lock was passed on, else 0; token is the token
--        of the grant to the waiter that was passed on (0 if none): a message announcing that
--        grant may still be on its way to the waiter's process, which must not take it
--
-- The caller runs this before its Lock returns. A release that ran just before it may have
-- granted the lock to the departing waiter ('~<waiter>:<token>'); it goes on to the next waiter
-- here, at once, rather than lapse after the hand-off window. A release that runs after it
-- finds the waiter gone from the queue.
--
-- Cancelling a context does not cancel a command Redis already received, and rueidis may send
-- the attempt and this script on different connections, so either may run first. If the
-- attempt ran first and took the lock, pass it on. If not, void the attempt so that it fails
-- when it arrives.

-- #include lib/clock.lua
-- #include lib/fence.lua
-- #include lib/queue.lua

local lock, fence, q, qx = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local waiter, owner = ARGV[1], ARGV[2]
local cur = redis.call('GET', lock)
if waiter ~= '' then
  if redis.call('ZREM', q, waiter) == 1 then
    redis.call('ZREM', qx, waiter)
  end
  local token = granted_to(cur, waiter) and (tonumber(string.sub(cur, #waiter + 3)) or 0)
  if token and token > tonumber(ARGV[8]) then
    pass_on(lock, fence, q, qx, ARGV[3], ARGV[4], ARGV[5], ARGV[6])
    return {1, token}
  end
end
if owner == '' then
  return {0, 0}
end
if cur == owner then
  pass_on(lock, fence, q, qx, ARGV[3], ARGV[4], ARGV[5], ARGV[6])
  return {1, 0}
end
-- Void the attempt. (A grant is made by a release, never in flight: nothing to void.)
local void_ttl = tonumber(ARGV[7])
redis.call('ZADD', qx, now() + void_ttl, '!' .. owner)
live_for(qx, void_ttl)
return {0, 0}
