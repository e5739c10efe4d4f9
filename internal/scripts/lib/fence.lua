-- lib/fence.lua: fencing tokens.

-- next_token() hands out the next fencing token of a name: max(last + 1, server time in µs).
-- Tokens strictly increase while the fence key lives (fence_ttl ms after the last one), and,
-- because they follow the clock, stay larger than any token a failed-over primary handed out
-- but never replicated once the promoted replica's clock has passed it, and than tokens whose
-- fence key expired (see docs/guarantees.md). One call in the common case: SET ... GET.
--
-- A fence may carry a mark, a '0' before its token (the value still reads as the same
-- integer, to Lua and to any client): a mutex's waiter voided an attempt of its own that may
-- still reach Redis (mutex_leave.lua), so a take of that mutex must look for a void mark, which
-- it otherwise need not (taken). No token begins with 0 (tokens are at least the
-- server time in µs). The mark is kept: the token is written back with it. It returns the
-- token, whether the fence carried the mark, and the fence's value before the call (nil if it
-- had none).
--
-- If the fence key holds no token to count on from (a value of another type; a string that is
-- not an integer; one at 2^53 - 1 or above, past which a Lua number cannot count by one, and
-- from which the reply to Redis would overflow), it returns nil, with the fence key as it
-- was (its TTL reset): the caller must not take the claim, and must report an error.
local function next_token(fence, fence_ttl, now_us)
  local token = now_us
  local last = redis.pcall('SET', fence, int(now_us), 'PX', fence_ttl, 'GET')
  if type(last) == 'table' then
    return nil -- another type (WRONGTYPE): nothing was written
  end
  local voids = false
  if last then
    voids = string.sub(last, 1, 1) == '0'
    local n = tonumber(last)
    if not n or n ~= math.floor(n) or n >= 2^53 - 1 then
      redis.call('SET', fence, last, 'PX', fence_ttl) -- put it back
      return nil
    end
    if n >= token then
      token = n + 1 -- the clock is behind the last token: count on from it
    end
    if n >= now_us or voids then
      redis.call('SET', fence, (voids and '0' or '') .. int(token), 'PX', fence_ttl)
    end
  end
  return token, voids, last
end

-- no_token() is the error reply of a claim refused because next_token() returned nil.
local function no_token(fence)
  return redis.error_reply('distsync: the fence key ' .. fence .. ' holds no fencing token')
end

-- taken() is the reply to a claim just written in key: {1, token}, with the name's next token;
-- or, if the fence key holds no token to count on from, the claim given back (key deleted) and
-- no_token's error. The fast paths of the acquire scripts end with it.
--
-- With qx, for the fast path of a mutex or a fair lock, which looks for no void mark of its
-- attempt before it takes the lock (that would be a call on every uncontended take): if the
-- fence carries the mark that one may be live, it looks now, for '!'..id in qx. A voided
-- attempt gives the lock back (key deleted: it was free, since its SET NX took it) and the
-- fence as it was, and replies void, as the script does to a voided attempt; the fence's mark
-- is dropped by the first take that finds no void mark live in qx (mark_voids, lib/queue.lua).
local function taken(key, fence, fence_ttl, qx, id, void)
  local now_ms, now_us = now()
  local token, voids, last = next_token(fence, fence_ttl, now_us)
  if not token then
    redis.call('DEL', key)
    return no_token(fence)
  end
  if voids and qx then
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
