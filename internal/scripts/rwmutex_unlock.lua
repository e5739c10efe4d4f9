-- rwmutex_unlock.lua: RUnlock or Unlock of a read-write mutex.
--
-- KEYS and ARGV: see lib/rw.lua (waiter, more, ttl, slack, fence_ttl and ops_ttl unused).
-- Reply: 1 released (now, or by an earlier attempt whose reply was lost: K.rel, lib/rel.lua); 0 the owner
--        held nothing (its lease lapsed, or it was deleted or taken)
--
-- A writer's Unlock admits and wakes every waiting reader with one publish, or, if none
-- waits, wakes the writers; the last reader's RUnlock wakes the waiting writers.

-- #include lib/clock.lua
-- #include lib/rw.lua
-- #include lib/rel.lua

local now_ms = now()
if A.mode == 'w' then
  if redis.call('GET', K.w) ~= A.owner then
    return released(K.rel, A.owner) and 1 or 0
  end
  local gone = redis.call('DEL', K.w) == 0 -- expired after the GET (miniredis only: extend.lua)
  if redis.call('EXISTS', K.rq) == 0 then
    -- No reader waits (after_write would admit none): tell the writers, as after_write does.
    redis.call(A.pub, A.ch .. ':w', 'w')
  else
    prune(now_ms)
    after_write(now_ms)
  end
  if gone then
    return 0 -- the waiters were told all the same: the lock is free
  end
  record_release(K.rel, A.owner, A.ttl)
  return 1
end
local at = redis.call('ZSCORE', K.r, A.owner)
if redis.call('ZREM', K.r, A.owner) == 0 then
  at = nil -- the set expired after the ZSCORE (miniredis only: extend.lua): the share lapsed
end
-- With no writer waiting (its key gone), there is nobody to wake or tell (a writer that
-- failed for a share marked itself in the same script): lapsed entries are left for the next
-- script that decides on them.
if redis.call('EXISTS', K.ww) == 1 then
  prune(now_ms)
  after_read(now_ms)
end
if at and tonumber(at) > now_ms then
  record_release(K.rel, A.owner, A.ttl)
  return 1
end
return released(K.rel, A.owner) and 1 or 0
