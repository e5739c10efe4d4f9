-- semaphore_leave.lua: take a waiter that gave up out of the queue; give back permits its
-- call took or was granted meanwhile, and serve the others (a large request that leaves can
-- let smaller ones behind it in).
--
-- KEYS and ARGV: see lib/sem.lua (id = the waiter id).
-- Reply: 1 if permits of the waiter were given back, else 0
--
-- The waiter id is voided, so that an attempt still in flight does nothing when it arrives.

-- #include lib/clock.lua
-- #include lib/fence.lua
-- #include lib/queue.lua
-- #include lib/sem.lua

dequeue(A.id)
local now_ms = now()
redis.call('ZADD', K.qx, now_ms + A.ops_ttl, '!' .. A.id)
live_for(K.qx, A.ops_ttl)
local back = 0
for _, o in ipairs({A.id, '~' .. A.id}) do
  if redis.call('HEXISTS', K.n, o) == 1 then
    redis.call('HDEL', K.n, o)
    redis.call('ZREM', K.h, o)
    back = 1
  end
end
serve(now_ms, function() return prune(now_ms) end, '')
return back
