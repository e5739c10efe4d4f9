-- mutex_acquire.lua: take a mutex, or join its queue.
--
-- KEYS[1] lock   the mutex: owner value, or '~'..waiter id while reserved for that waiter
-- KEYS[2] fence  the last fencing token handed out for this name
-- KEYS[3] q      queue: waiter id -> arrival (µs)
-- KEYS[4] qx     queue: waiter id -> entry deadline (ms)
-- ARGV[1] owner      value that identifies this acquisition (unique per attempt)
-- ARGV[2] ttl        lease in ms
-- ARGV[3] fence_ttl  ms the fence key outlives the last acquisition
-- ARGV[4] waiter     waiter id of the caller's process queue; '' for TryLock (never queues)
-- ARGV[5] requeue    '1': more goroutines of this process wait, keep the waiter queued (at the tail)
-- ARGV[6] slack      ms a queue entry outlives the lease it waits behind (the waiter re-checks before)
-- ARGV[7] channel    pub/sub channel of the mutex
-- ARGV[8] pub        'PUBLISH' or 'SPUBLISH'
-- Reply: {1, token}            acquired; token is the fencing token
--        {0, pttl, reserved}   not acquired: the lock (or a reservation for another waiter,
--                              reserved = 1) ends in pttl ms unless renewed or claimed

-- #include lib/clock.lua
-- #include lib/queue.lua

local lock, fence, q, qx = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local owner, ttl, waiter = ARGV[1], tonumber(ARGV[2]), ARGV[4]

-- An attempt whose caller gave up while it was in flight was voided by mutex_leave.lua;
-- it must not take the lock when it arrives late.
if redis.call('ZSCORE', qx, '!' .. owner) then
  return {0, 0, 0}
end

local cur = redis.call('GET', lock)
local now_ms, now_us = now()
if cur and (waiter == '' or cur ~= '~' .. waiter) then
  local pttl = redis.call('PTTL', lock)
  if pttl < 0 then
    pttl = ttl -- a lock key without a TTL is not ours to judge; wait as if it were a fresh lease
  end
  if waiter ~= '' then
    local live = pttl + tonumber(ARGV[6])
    redis.call('ZADD', q, 'NX', now_us, waiter) -- NX: a waiter keeps its place when it re-checks
    redis.call('ZADD', qx, now_ms + live, waiter)
    keep_until(q, qx, live)
  end
  local reserved = 0
  if string.sub(cur, 1, 1) == '~' then
    reserved = 1
  end
  return {0, pttl, reserved}
end

-- Free, or reserved for this waiter. The token is max(last + 1, server time in µs): strictly
-- increasing while the fence key lives, and, because it follows the clock, still larger than
-- any token a failed-over primary handed out but never replicated once the promoted
-- replica's clock has passed it (see docs/guarantees.md).
local token = tonumber(redis.call('GET', fence) or '0') + 1
if now_us > token then
  token = now_us
end
redis.call('SET', fence, int(token), 'PX', ARGV[3])
redis.call('SET', lock, owner, 'PX', ttl)
if waiter ~= '' then
  if ARGV[5] == '1' then
    local live = ttl + tonumber(ARGV[6])
    redis.call('ZADD', q, now_us, waiter)
    redis.call('ZADD', qx, now_ms + live, waiter)
    keep_until(q, qx, live)
  elseif redis.call('ZREM', q, waiter) == 1 then
    redis.call('ZREM', qx, waiter)
  end
end
if cur then
  -- A claimed reservation: tell the other waiters to stop timing it.
  redis.call(ARGV[8], ARGV[7], 'c')
end
return {1, token}
