-- mutex_leave.lua: clean up after a waiter that gave up (its context ended).
--
-- KEYS[1] lock   KEYS[2] fence   KEYS[3] q   KEYS[4] qx   (as in mutex_acquire.lua)
-- ARGV[1] waiter     the waiter id of the caller's process
-- ARGV[2] owner      value of an acquisition the caller will not use: an attempt whose reply it
--                    did not wait for; ''
-- ARGV[3] window     ms a grant passed on here lasts unless confirmed
-- ARGV[4] fence_ttl  ms the fence key outlives the last acquisition
-- ARGV[5] prefix     channel prefix; waiter w listens on prefix..':'..w
-- ARGV[6] pub        'PUBLISH' or 'SPUBLISH'
-- ARGV[7] void_ttl   ms to remember a voided attempt, longer than any command stays in flight
-- ARGV[8] last       the largest token the waiter's process acquired: a grant with a token up
--                    to it was taken by one of its goroutines, which holds it
-- ARGV[9] dequeue    '1': no goroutine of the process waits any more: take the waiter out of
--                    the queue, and pass on a grant made to it with a token above last; '0':
--                    others still wait (they keep the entry, and take the grant)
-- ARGV[10] grant     a token whose grant to the waiter nobody will take ('0' if none): passed
--                    on if the lock is still exactly that grant, whatever else happened since
-- Reply: {passed, token}: passed is 1 if the lock was passed on, else 0; token is the token
--        of a grant to the waiter that was passed on (0 if none): a message announcing that
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
-- when it arrives (also after a grant was passed on here: the lock may be free then).

-- #include lib/clock.lua
-- #include lib/fence.lua
-- #include lib/queue.lua

local lock, fence, q, qx = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local waiter, owner = ARGV[1], ARGV[2]
local passed, given = 0, 0
local cur = redis.call('GET', lock)
local token = granted_to(cur, waiter) and (tonumber(string.sub(cur, #waiter + 3)) or 0)
if ARGV[9] == '1' then
  if redis.call('ZREM', q, waiter) == 1 then
    redis.call('ZREM', qx, waiter)
  end
end
if token and (ARGV[9] == '1' and token > tonumber(ARGV[8]) or ARGV[10] ~= '0' and cur == '~' .. waiter .. ':' .. ARGV[10]) then
  pass_on(lock, fence, q, qx, ARGV[3], ARGV[4], ARGV[5], ARGV[6])
  passed, given = 1, token
  cur = redis.call('GET', lock)
end
if owner ~= '' then
  if cur == owner or cur == owner .. '+' then
    pass_on(lock, fence, q, qx, ARGV[3], ARGV[4], ARGV[5], ARGV[6])
    passed = 1
  else
    -- Void the attempt. (A grant is made by a release, never in flight: nothing to void.)
    -- The fence is marked (a '0' before its token) so that the fast path of
    -- mutex_acquire.lua, which otherwise does not, looks for the void mark (lib/fence.lua).
    local void_ttl = tonumber(ARGV[7])
    redis.call('ZADD', qx, now() + void_ttl, '!' .. owner)
    live_for(qx, void_ttl)
    mark_voids(fence, void_ttl)
  end
end
return {passed, given}
