-- holders.lua: who holds a name, for inspection. It writes nothing.
--
-- ARGV[1] layout: how the primitive keeps its claims
--   'string'  mutex, fair: KEYS[1] the lock, a string holding the owner value (a grant not yet
--             confirmed is '~<waiter>:<token>'), KEYS[2] the fence (the holder's token: every
--             acquisition takes the next one, so the last one is the holder's)
--   'hash'    reentrant: KEYS[1] the lock, a hash 'o:'..owner -> hold count, 't' -> token
--   'rw'      rwmutex: KEYS[1] the writer's claim (as 'string'), KEYS[2] the readers (zset
--             owner -> lease expiry in ms), KEYS[3] the fence (readers carry the last writer's
--             token, which is the fence's while they hold: no writer gets in meanwhile)
--   'sem'     semaphore: KEYS[1] holders (zset owner -> lease expiry in ms), KEYS[2] holders
--             (hash owner -> permits held)
-- Reply: one {owner, remaining_ms, token, count, shared} per live hold (shared is 1 for a
-- read hold); none if the name is free. remaining_ms is what Redis keeps the hold for unless
-- it is renewed. O(holders).

-- #include lib/clock.lua

local layout = ARGV[1]
local out = {}

-- token() reads a fence (or a token field), 0 if it holds none.
local function token(v)
  return tonumber(v or '0') or 0
end

-- exclusive() adds the holder of the string claim key, if any.
local function exclusive(key, fence)
  local owner = redis.call('GET', key)
  if not owner then
    return
  end
  local pttl = redis.call('PTTL', key)
  local t = string.match(owner, '^~.*:(%d+)$') -- a grant names its token
  out[#out + 1] = {owner, pttl, t and tonumber(t) or token(redis.call('GET', fence)), 1, 0}
end

-- zset() adds the live members of a zset of owner -> lease expiry.
local function zset(key, now_ms, tok, counts)
  local e = redis.call('ZRANGEBYSCORE', key, '(' .. now_ms, '+inf', 'WITHSCORES')
  for i = 1, #e, 2 do
    local n, shared = 1, 1
    if counts then -- a count that is not a whole number >= 1 is no hold (lib/sem.lua)
      n, shared = tonumber(redis.call('HGET', counts, e[i]) or '') or 0, 0
      if n ~= math.floor(n) or n >= 2^53 then
        n = 0
      end
    end
    local left = tonumber(e[i + 1]) - now_ms
    if left == math.huge then
      left = -1 -- no expiry, as PTTL says it
    end
    if n >= 1 then
      out[#out + 1] = {e[i], math.floor(left), tok, n, shared}
    end
  end
end

if layout == 'string' then
  exclusive(KEYS[1], KEYS[2])
elseif layout == 'hash' then
  local f = redis.call('HGETALL', KEYS[1])
  local t = 0
  for i = 1, #f, 2 do
    if f[i] == 't' then
      t = token(f[i + 1])
    end
  end
  local pttl = redis.call('PTTL', KEYS[1])
  for i = 1, #f, 2 do
    if string.sub(f[i], 1, 2) == 'o:' and (tonumber(f[i + 1]) or 0) >= 1 then
      out[#out + 1] = {string.sub(f[i], 3), pttl, t, tonumber(f[i + 1]), 0}
    end
  end
elseif layout == 'rw' then
  exclusive(KEYS[1], KEYS[3])
  zset(KEYS[2], now(), token(redis.call('GET', KEYS[3])), nil)
elseif layout == 'sem' then
  zset(KEYS[1], now(), 0, KEYS[2])
else
  return redis.error_reply('holders.lua: unknown layout ' .. tostring(layout))
end
return out
