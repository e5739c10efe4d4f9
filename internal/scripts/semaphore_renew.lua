-- semaphore_renew.lua: renew a holder's permits, and tell the head of the queue when its
-- request would fit. The handle's renewal loop sends it, instead of extend.lua, for every
-- hold of a semaphore; it also confirms permits granted inside Redis (the first renewal).
--
-- KEYS and ARGV: see lib/sem.lua (id = the holder's owner value; n and extra unused).
-- Reply: 1 renewed; 0 the permits are gone (lapsed, released, or taken away)
--
-- As extend.lua (kind 'z'), it moves the holder's expiry to ttl from now if it has not
-- passed, and keeps h, n and size alive as long. If anyone waits, it then serves the queue
-- (permits that came back by themselves, unseen, go on at once) and tells the head that is
-- left when its request would fit if no holder renewed again: the head re-checks just after
-- that, so permits of holders that died go on a round trip after their leases run out; while
-- the holders renew, the moment keeps moving later and the head sends nothing. That costs
-- O(h) in the holders (lib/sem.lua), only while someone waits: a renewal nobody waits behind
-- is one EXISTS more than extend.lua, and makes none of the shared Lua's closures.

-- #include lib/clock.lua

local now_ms = now()
local at = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not at or tonumber(at) <= now_ms then
  return 0
end
local ttl = tonumber(ARGV[4])
if redis.call('ZADD', KEYS[1], now_ms + ttl, ARGV[1]) == 1 then
  -- h expired after the ZSCORE (miniredis only): every hold had lapsed, and n (which lives as
  -- long) goes with it.
  redis.call('DEL', KEYS[1], KEYS[2])
  return 0
end
for _, k in ipairs({KEYS[1], KEYS[2], KEYS[6]}) do -- h, n, size
  live_for(k, ttl)
end
if redis.call('EXISTS', KEYS[3]) == 0 then -- q: nobody waits
  return 1
end

-- #include lib/fence.lua
-- #include lib/queue.lua
-- #include lib/sem.lua

serve(now_ms, function() return prune(now_ms) end, '')
return 1
