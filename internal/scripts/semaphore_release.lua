-- semaphore_release.lua: give back n permits of one owner, and serve the waiters.
--
-- KEYS and ARGV: see lib/sem.lua (id = the owner, extra = the request id).
-- Reply: 1 given back (or already, by this request id); 0 the owner holds nothing: its
--        lease lapsed or its permits were taken away (lost)

-- #include lib/clock.lua
-- #include lib/fence.lua
-- #include lib/queue.lua
-- #include lib/ops.lua
-- #include lib/sem.lua

if op_state(K.ops, A.extra) == 'applied' then
  return 1
end
local now_ms = now()
local used = prune(now_ms)
local held = tonumber(redis.call('HGET', K.n, A.id))
if not held then
  return 0
end
local back = math.min(A.n, held)
if held > back then
  redis.call('HSET', K.n, A.id, held - back)
else
  redis.call('HDEL', K.n, A.id)
  redis.call('ZREM', K.h, A.id)
end
op_mark(K.ops, '', A.extra, now_ms, A.ops_ttl)
serve(now_ms, used - back, '')
return 1
