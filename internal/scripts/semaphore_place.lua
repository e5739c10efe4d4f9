-- semaphore_place.lua: renew a waiter's place in a semaphore's queue, and be the backstop of a
-- stalled queue. Every waiter sends this each third of its waiter lease, batched with the
-- handle's other renewals.
--
-- KEYS and ARGV: see lib/sem.lua (id = the waiter id).
-- Reply: 1 the place was there and is renewed; 0 it was gone (lapsed, or pruned)
--
-- Permits that come back by themselves publish nothing: a grant to a waiter that died lapses,
-- a holder's lease runs out. The waiter told to watch a grant may be dead too. So the head of
-- the queue, on each renewal of its place, serves the queue if the permits it waits for are
-- free: the queue stalls for at most a renewal period after that, not until a backstop. Only
-- the head pays for the check; a dead head's place lapses within a waiter lease, and the next
-- waiter is the head then.

-- #include lib/clock.lua
-- #include lib/fence.lua
-- #include lib/queue.lua
-- #include lib/sem.lua

local now_ms = now()
local at = redis.call('ZSCORE', K.qx, A.id)
if not at or tonumber(at) <= now_ms then
  return 0
end
redis.call('ZADD', K.qx, now_ms + A.wlease, A.id)
for _, k in ipairs({K.q, K.qx, K.qn, K.size}) do
  live_for(k, A.wlease)
end
if head(now_ms) == A.id then
  serve(now_ms, function() return prune(now_ms) end, '')
end
return 1
