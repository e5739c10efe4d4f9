-- semaphore_acquire.lua: take n permits if they are free and nobody waits before the caller,
-- or queue the caller.
--
-- KEYS and ARGV: see lib/sem.lua (extra = '1' for TryAcquire, which never queues).
-- Reply: {1}        the caller holds n permits as owner id
--        {2}        permits granted to the caller were adopted: it holds them as '~'..id
--        {0, wait, head}
--                   queued (or, for a try, not taken): head = 1 if the caller heads the
--                   queue, and its request would fit in wait ms if no holder renewed again
--                   (each renewal tells it anew: lib/sem.lua, serve()); head = 0 otherwise,
--                   and permits could come back by themselves in wait ms (the earliest lease)
--        {-1}       the waiter gave up (semaphore_leave.lua voided it): nothing done
--        {-2, size} the semaphore's size in Redis is size, not the caller's
--
-- Idempotent for one waiter id: a retry after a lost reply finds the permits taken or the
-- place kept.

-- #include lib/clock.lua
-- #include lib/fence.lua
-- #include lib/queue.lua
-- #include lib/sem.lua

if redis.call('ZSCORE', K.qx, '!' .. A.id) then
  return {-1}
end
local ok, size = claim_size()
if not ok then
  return {-2, size}
end
local now_ms, now_us = now()
local used, held = prune(now_ms)
local mine = {held[A.id], held['~' .. A.id]}
if mine[1] or mine[2] then
  -- A retry of a take that went through ({1}), or a grant the caller could not take from its
  -- message, adopted ({2}). It writes (the lease from now), as every reply that reports a
  -- claim does: a WAIT after it (distsync.WithReplicaAck) then waits for the take.
  redis.call('ZADD', K.h, now_ms + A.ttl, mine[1] and A.id or '~' .. A.id)
  if not live_for(K.n, A.ttl) then
    -- n expired after the HGETALL (miniredis only: extend.lua), and every hold with it (h lives
    -- no longer): h, which the ZADD may have made again, goes too; the caller looks again.
    redis.call('DEL', K.h, K.n)
    return {0, 0, 0}
  end
  live_for(K.h, A.ttl)
  return {mine[1] and 1 or 2}
end
-- Nobody waits (the caller included) and the permits are free: take them, without queueing
-- the caller first (the result serve() would come to, in a third of the calls).
if not head(now_ms) and A.n <= A.size - used then
  hold(A.id, A.n, now_ms, A.ttl, true, next(held) == nil)
  return {1}
end
if A.extra == '1' then
  return {0, wait(now_ms), 0}
end
local live = A.ttl + A.slack + A.wlease
redis.call('ZADD', K.q, 'NX', now_us, A.id)
redis.call('ZADD', K.qx, now_ms + A.wlease, A.id)
redis.call('HSET', K.qn, A.id, A.n)
for _, k in ipairs({K.q, K.qx, K.qn}) do
  live_for(k, live)
end
local fit = serve(now_ms, function() return used end, A.id)
if redis.call('HEXISTS', K.n, A.id) == 1 then
  return {1}
end
if fit then
  return {0, fit, 1}
end
return {0, wait(now_ms), 0}
