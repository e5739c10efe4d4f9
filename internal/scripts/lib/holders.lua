-- lib/holders.lua: who holds a claim, as rows of distsync.Holder, for inspection. Nothing here
-- writes.
--
-- A row is {owner, remaining_ms, token, count, shared}: the hold's owner value, what Redis
-- keeps it for unless it is renewed (-1: no expiry), its fencing token, its count (a reentrant
-- owner's hold count, a semaphore holder's permits; 1 otherwise) and shared (1 for a read
-- hold). Each function appends the rows it finds to out. O(holders).

-- fence_token() reads a fence (or a token field), 0 if it holds none.
local function fence_token(v)
  return tonumber(v or '0') or 0
end

-- unmarked() returns a lock's value v without the mark of a holder someone queued behind (a
-- '+' after it: mark_waited, lib/queue.lua): the holder's owner value.
local function unmarked(v)
  return (string.gsub(v, '%+$', ''))
end

-- exclusive_holder() adds the holder of the string claim key, if any. Its token is the one a
-- grant names ('~<waiter>:<token>'), else fence's: every acquisition takes the next token, so
-- the last one handed out is the holder's.
local function exclusive_holder(out, key, fence)
  local owner = redis.call('GET', key)
  if not owner then
    return
  end
  owner = unmarked(owner)
  local pttl = redis.call('PTTL', key)
  local t = string.match(owner, '^~.*:(%d+)$') -- a grant names its token
  out[#out + 1] = {owner, pttl, t and tonumber(t) or fence_token(redis.call('GET', fence)), 1, 0}
end

-- zset_holders() adds the live members of key, a zset of owner -> lease expiry in ms, with
-- token tok: shared holds (one each), or, with counts (a hash owner -> permits), holders of
-- that many permits.
local function zset_holders(out, key, now_ms, tok, counts)
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

-- hash_holders() adds the owner of key, a reentrant hold: a hash 'o:'..owner -> hold count,
-- 't' -> token; or, while the mutex is handed to a waiting process that has not taken it up
-- yet, the grant 'g' -> '~<waiter>:<token>', as a row of count 0 (no Lock holds it yet).
local function hash_holders(out, key)
  local f = redis.call('HGETALL', key)
  local t = 0
  for i = 1, #f, 2 do
    if f[i] == 't' then
      t = fence_token(f[i + 1])
    end
  end
  local pttl = redis.call('PTTL', key)
  for i = 1, #f, 2 do
    if string.sub(f[i], 1, 2) == 'o:' and (tonumber(f[i + 1]) or 0) >= 1 then
      out[#out + 1] = {string.sub(f[i], 3), pttl, t, tonumber(f[i + 1]), 0}
    elseif f[i] == 'g' then
      out[#out + 1] = {f[i + 1], pttl, fence_token(string.match(f[i + 1], '^~.*:(%d+)$')), 0, 0}
    end
  end
end
