-- fair_leave.lua: take a waiter that gave up out of a fair lock's queue.
--
-- KEYS[1] lock   KEYS[2] fence   KEYS[3] q   KEYS[4] qx   (as in fair_acquire.lua)
-- ARGV[1] waiter     the waiter id of the call that gave up
-- ARGV[2] window     ms a grant passed on here lasts unless confirmed
-- ARGV[3] fence_ttl  ms the fence key outlives the last acquisition
-- ARGV[4] prefix     channel prefix (lib/queue.lua)
-- ARGV[5] pub        'PUBLISH' or 'SPUBLISH'
-- ARGV[6] void_ttl   ms to remember the waiter as void, longer than a command stays in flight
-- With a record of the holder (election, see lib/queue.lua), also:
-- KEYS[5] values     the record's values hash
-- ARGV[7] observers  the observers' channel
-- ARGV[8] ttl        the lease in ms
-- Reply: 1 if the lock was the waiter's (taken or granted) and was passed on, else 0
--
-- If the hand-off raced with the leaving (the lock was granted to the waiter, or its attempt
-- took it before this ran), the lock goes on to the next waiter, not into a void. Either way
-- the waiter id is voided, so that an attempt still in flight does nothing when it arrives.

-- #include lib/clock.lua
-- #include lib/fence.lua
-- #include lib/queue.lua

local lock, fence, q, qx = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local w = ARGV[1]
local rec = record(5, 7)
redis.call('ZREM', q, w)
redis.call('ZREM', qx, w)
forget(rec, w)
local void_ttl = tonumber(ARGV[6])
redis.call('ZADD', qx, now() + void_ttl, '!' .. w)
live_for(qx, void_ttl)
mark_voids(fence, void_ttl) -- for fair_acquire.lua's fast path
local cur = redis.call('GET', lock)
if cur == w or cur == w .. '+' or (cur and granted_to(cur, w)) then
  pass_on(lock, fence, q, qx, ARGV[2], ARGV[3], ARGV[4], ARGV[5], rec)
  return 1
end
return 0
