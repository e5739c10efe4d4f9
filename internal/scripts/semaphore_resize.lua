-- semaphore_resize.lua: change the size of a semaphore on purpose, and serve the waiters that
-- now fit. Holders keep what they hold; if the semaphore shrank below the permits in use, new
-- permits are handed out only once enough have come back.
--
-- KEYS and ARGV: see lib/sem.lua (size = the new size; id and n unused).
-- Reply: the size before ('0' if none was set)

-- #include lib/clock.lua
-- #include lib/fence.lua
-- #include lib/queue.lua
-- #include lib/sem.lua

local before = size_in_redis() or 0
redis.call('SET', K.size, A.size, 'PX', A.ttl + A.wlease + A.slack)
local now_ms = now()
serve(now_ms, function() return prune(now_ms) end, '')
return before
