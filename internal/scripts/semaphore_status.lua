-- semaphore_status.lua: a snapshot of a semaphore, for inspection. It writes nothing.
--
-- KEYS and ARGV: see lib/sem.lua (only the keys are used).
-- Reply: {size, used, waiters, wanted}: the size Redis has (0 if none: nobody holds or waits),
-- the permits held by live holders, the live waiters, and the permits they ask for.
-- O(holders + waiters).

-- #include lib/clock.lua
-- #include lib/fence.lua
-- #include lib/queue.lua
-- #include lib/sem.lua

local now_ms = now()
local used = 0
for _, o in ipairs(redis.call('ZRANGEBYSCORE', K.h, '(' .. now_ms, '+inf')) do
  used = used + (permits(redis.call('HGET', K.n, o)) or 0)
end
local waiters, wanted = 0, 0
for _, w in ipairs(redis.call('ZRANGE', K.q, 0, -1)) do
  if tonumber(redis.call('ZSCORE', K.qx, w) or '0') > now_ms then
    waiters = waiters + 1
    wanted = wanted + (permits(redis.call('HGET', K.qn, w)) or 0)
  end
end
return {size_in_redis() or 0, used, waiters, wanted}
