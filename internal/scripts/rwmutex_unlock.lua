-- rwmutex_unlock.lua: RUnlock or Unlock of a read-write mutex.
--
-- KEYS and ARGV: see lib/rw.lua (waiter, more, ttl, slack, fence_ttl and ops_ttl unused).
-- Reply: 1 released; 0 the owner held nothing (its lease lapsed, or it was deleted or taken)
--
-- A writer's Unlock admits and wakes every waiting reader with one publish, or, if none
-- waits, wakes the writers; the last reader's RUnlock wakes the writers.

-- #include lib/clock.lua
-- #include lib/rw.lua

local now_ms = now()
if A.mode == 'w' then
  if redis.call('GET', K.w) ~= A.owner then
    return 0
  end
  redis.call('DEL', K.w)
  prune(now_ms)
  after_write(now_ms)
  return 1
end
local at = redis.call('ZSCORE', K.r, A.owner)
redis.call('ZREM', K.r, A.owner)
prune(now_ms)
after_read()
if at and tonumber(at) > now_ms then
  return 1
end
return 0
