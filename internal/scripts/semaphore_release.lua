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
local lease = tonumber(redis.call('ZSCORE', K.h, A.id))
local held = lease and lease > now_ms and permits(redis.call('HGET', K.n, A.id))
if not held then
  prune(now_ms) -- the owner's lease lapsed, or its permits were taken away
  return 0
end
local back = math.min(A.n, held)
if held > back then
  if redis.call('HSET', K.n, A.id, held - back) == 1 then
    -- n expired after the HGET (miniredis only: extend.lua), h with it (they live as long):
    -- the hold had lapsed, and the hash the HSET made of its own, with no TTL, must not stay.
    redis.call('DEL', K.n, K.h)
    return 0
  end
else
  redis.call('HDEL', K.n, A.id)
  if redis.call('ZREM', K.h, A.id) == 0 then
    return 0 -- h expired after the ZSCORE (miniredis only: extend.lua): the hold had lapsed
  end
end
op_mark(K.ops, '', A.extra, now_ms, A.ops_ttl)
-- The permits in use are summed (and lapsed holders dropped) only if someone waits for them.
serve(now_ms, function() return prune(now_ms) end, '')
return 1
