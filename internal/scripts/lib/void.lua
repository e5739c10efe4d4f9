-- lib/void.lua: the fence's mark for a live void mark, for the scripts of a mutex and a fair
-- lock that void an attempt (mutex_leave.lua, fair_leave.lua) or take a free lock on their
-- fast path (mutex_acquire.lua, fair_acquire.lua); see next_token in lib/fence.lua. Kept out
-- of lib/fence.lua, which every script that hands out tokens includes: every local function
-- is a closure made again on every run of a script that includes it.
--
-- Requires lib/clock.lua and lib/fence.lua.

-- taken_unless_void() is taken() for the fast path of a mutex or a fair lock, which looks for
-- no void mark of its attempt before it takes the lock (that would be a call on every
-- uncontended take): if the fence carries the mark that one may be live, it looks now, for
-- '!'..id in qx. A voided attempt gives the lock back (key deleted: it was free, since its SET
-- NX took it) and the fence as it was, and replies void, as the script does to a voided
-- attempt; the fence's mark is dropped by the first take that finds no void mark live in qx.
local function taken_unless_void(key, fence, fence_ttl, qx, id, void)
  local now_ms, now_us = now()
  local token, voids, last = next_token(fence, fence_ttl, now_us)
  if not token then
    redis.call('DEL', key)
    return no_token(fence)
  end
  if voids then
    if redis.call('ZSCORE', qx, '!' .. id) then
      redis.call('DEL', key)
      redis.call('SET', fence, last, 'PX', fence_ttl)
      return void
    end
    local live = false
    for _, m in ipairs(redis.call('ZRANGEBYSCORE', qx, '(' .. now_ms, '+inf')) do
      if string.sub(m, 1, 1) == '!' then
        live = true
        break
      end
    end
    if not live then
      redis.call('SET', fence, int(token), 'PX', fence_ttl)
    end
  end
  return {1, token}
end

-- mark_voids() marks fence for a void mark just written in qx, kept void_ttl ms: a '0' before
-- its token (next_token), and a life at least as long as the void mark's.
local function mark_voids(fence, void_ttl)
  local f = redis.pcall('GET', fence)
  if type(f) == 'table' then
    return -- another type: next_token refuses it, so no take can go through
  end
  if f and string.sub(f, 1, 1) ~= '0' then
    -- XX: miniredis, which expires keys between a script's commands, may have dropped it.
    f = redis.call('SET', fence, '0' .. f, 'XX', 'KEEPTTL')
  end
  if not (f and live_for(fence, void_ttl)) then
    redis.call('SET', fence, '0', 'PX', void_ttl) -- no fence: a token of 0, marked
  end
end
