-- inspect.lua: a snapshot of primitives, for package inspect: who holds, who waits and in
-- which order, and what each kind keeps besides. It writes nothing, not even a TTL (package
-- inspect's tests run it with EVAL_RO, which Redis refuses to any script that writes), and
-- it reads every key of a primitive in the same step, so what it returns is one consistent
-- state.
--
-- ARGV: the kinds to read, one each, any of 'mutex', 'fair', 'election', 'reentrant',
--       'rwmutex', 'semaphore', 'waitgroup', 'once', 'rate'.
-- KEYS: each kind's keys, in the order of ARGV, all in one slot (the kinds of one name, or
--       one key of a once group):
--   mutex (6)         lock, fence, q, qx, rel                (lib/queue.lua), and with, the
--                     record of the set of mutexes the hold is part of (mutex_acquire_all.lua)
--   fair (5)          lock, fence, q, qx, rel                (lib/queue.lua)
--   election (6)      lock, fence, q, qx, rel, v             (lib/queue.lua; v: the record)
--   reentrant (5)     lock (a hash), fence, ops, q, qx       (lib/queue.lua)
--   rwmutex (9)       w, r, ww, rq, ra, fence, ops, wo, rel  (lib/rw.lua)
--   semaphore (7)     h, n, q, qx, qn, size, ops             (lib/sem.lua)
--   waitgroup (3)     s, m, ops                              (lib/waitgroup.lua)
--   once (3)          lead, kept, fence                      (once_begin.lua)
--   rate (1)          bucket, a hash                         (lib/rate.lua)
-- Reply: one {exists, holders, queue, fence, extra} per kind, in the order of ARGV:
--   exists   how many of the kind's keys exist: 0 if Redis has nothing of it
--   holders  {owner, remaining_ms, token, count, shared} per live hold (lib/holders.lua); for
--            a waitgroup its live members (count 1 each), for a once key its leader
--   queue    {id, remaining_ms, waited_ms, weight, mode, value} per live waiter, in the order
--            it is served. remaining_ms: how long Redis keeps the place unless the waiter
--            renews or re-checks it; waited_ms: how long the waiter has had its place, by the
--            server's clock (-1 where Redis keeps no arrival: rwmutex readers); weight: the
--            permits asked for (semaphore), else 1; mode: '' (exclusive), 'r' (a reader that
--            waits) or 'a' (a reader the last writer's Unlock admitted, not in yet); value: an
--            election candidate's value, else ''. A rwmutex lists its admitted readers, then
--            its waiting writers in their turn with its waiting readers (in no order among
--            themselves: Redis keeps none) where the next writer's Unlock admits them: before
--            the first waiting writer if a writer holds, after it otherwise.
--   fence    the last fencing token handed out, 0 if none is kept
--   extra    semaphore: {size, in_use} (size 0 if Redis has none)
--            reentrant: {maker}, the request id that made the hold ('<handle id>:<n>'), {}
--              if nobody holds
--            election: {term, rev, value} of the leader, {} if nobody leads
--            waitgroup: {units, round, open, lost, err, r1, o1, r2, o2, ...}: the plain units,
--              the round ('' if none), 1 if it is open, the open round's lost members and
--              first error, then each kept outcome: round, '<lost>\n<err>'
--            once: {status, kept_ms}: the kept result's status byte ('' if none is kept) and
--              its PTTL (-1: kept until deleted)
--            mutex: {names} while the holder holds it as one of a set (mutex.All): the JSON
--              array of the set's names that its record keeps; {} otherwise
--            rate: {tokens, since_us, limit, burst, now, next_us}: the tokens at the bucket's
--              last write and the µs since it; the limit and burst stored by SetLimit and
--              SetBurst ('' for none: each caller's own applies); the tokens now, as the
--              next decision would find them, if both are stored (else '': Redis does not
--              know the rate they refill at); the µs until the latest time to act reserved
--              (0 if it has passed). Floats as strings (lib/rate.lua's flt).
--            others: {}
-- Holders and waiters whose lease lapsed, which the primitive's next script drops, are left
-- out. O(holders + waiters).

-- #include lib/clock.lua
-- #include lib/holders.lua
-- #include lib/rate.lua

local nkeys = {mutex = 6, fair = 5, election = 6, reentrant = 5, rwmutex = 9, semaphore = 7, waitgroup = 3, once = 3,
  rate = 1}
local now_ms, now_us = now()

-- fence_of() returns the token a fence key holds, 0 if none (or not a string).
local function fence_of(key)
  local v = redis.pcall('GET', key)
  if type(v) ~= 'string' then
    return 0
  end
  return tonumber(v) or 0
end

-- ms() turns a deadline in ms (a zset score) into ms left: nil if it has passed, -1 if it is
-- infinite (no script writes one; the reply must stay an integer).
local function ms(deadline)
  local d = tonumber(deadline)
  if not d or d <= now_ms then
    return nil
  elseif d == math.huge then
    return -1
  end
  return math.floor(d - now_ms)
end

-- waited() turns an arrival in µs (a queue's score) into the ms since, -1 if it is no time.
local function waited(arrival_us)
  local a = tonumber(arrival_us)
  if not a or a ~= a or a == math.huge or a == -math.huge then
    return -1
  end
  return math.max(math.floor((now_us - a) / 1000), 0)
end

-- lock_queue() returns the live waiters of a lock's queue (lib/queue.lua), in order; with a
-- record (values), each with its value.
local function lock_queue(q, qx, values)
  local out = {}
  local e = redis.call('ZRANGE', q, 0, -1, 'WITHSCORES')
  for i = 1, #e, 2 do
    local left = ms(redis.call('ZSCORE', qx, e[i]))
    if left then
      local value = ''
      if values then
        value = redis.call('HGET', values, e[i]) or ''
      end
      out[#out + 1] = {e[i], left, waited(e[i + 1]), 1, '', value}
    end
  end
  return out
end

-- live_entries() appends the live members of z (member -> deadline in ms), in mode, to out.
local function live_entries(out, z, mode)
  local e = redis.call('ZRANGEBYSCORE', z, '(' .. now_ms, '+inf', 'WITHSCORES')
  for i = 1, #e, 2 do
    out[#out + 1] = {e[i], ms(e[i + 1]) or 0, -1, 1, mode, ''}
  end
end

local read = {}

-- mutex, fair, election: a string claim, a queue, a fence; an election's record too.
local function lock(k, values)
  local holders = {}
  exclusive_holder(holders, k[1], k[2])
  local extra = {}
  local cur = holders[1] and holders[1][1]
  if values and cur then
    -- The leader as election_leader.lua reads it: the holder, once the record names it (a
    -- grant not yet confirmed is listed as a holder, but leads nobody yet).
    local gw, gterm = string.match(cur, '^~(.*):(%d+)$')
    local waiter = gw or cur
    if redis.call('HGET', values, '@') == waiter then
      local term = tonumber(redis.call('HGET', values, '@t') or '') or tonumber(gterm or '') or fence_of(k[2])
      holders[1][3] = term
      extra = {term, tonumber(redis.call('HGET', values, '#') or '0') or 0, redis.call('HGET', values, waiter) or ''}
    elseif gterm then
      holders[1][3] = tonumber(gterm)
    end
  end
  return {holders, lock_queue(k[3], k[4], values), fence_of(k[2]), extra}
end

read.mutex = function(k)
  local r = lock(k, nil)
  -- The record of a set is '<owner>\n<names>'. It is the current hold's only if it names the
  -- lock's owner value: one left by an earlier hold lingers until its lease would have ended.
  local rec, cur = redis.call('GET', k[6]), redis.call('GET', k[1])
  cur = cur and unmarked(cur)
  if rec and cur and string.sub(rec, 1, #cur + 1) == cur .. '\n' then
    r[4] = {string.sub(rec, #cur + 2)}
  end
  return r
end
read.fair = function(k)
  return lock(k, nil)
end
read.election = function(k)
  return lock(k, k[6])
end

read.reentrant = function(k)
  local holders = {}
  hash_holders(holders, k[1])
  local extra = {}
  local maker = redis.call('HGET', k[1], 'a') -- the request id that made the hold: '<handle id>:<n>'
  if maker then
    extra[1] = maker
  end
  return {holders, lock_queue(k[4], k[5], nil), fence_of(k[2]), extra}
end

read.rwmutex = function(k)
  local holders = {}
  exclusive_holder(holders, k[1], k[6])
  zset_holders(holders, k[2], now_ms, fence_of(k[6]), nil)
  local writers, seen = {}, {}
  local wo = redis.call('ZRANGE', k[8], 0, -1, 'WITHSCORES')
  for i = 1, #wo, 2 do
    local left = ms(redis.call('ZSCORE', k[3], wo[i])) -- a writer waits while its mark lives
    if left then
      writers[#writers + 1] = {wo[i], left, waited(wo[i + 1]), 1, '', ''}
      seen[wo[i]] = true
    end
  end
  local marks = {}
  live_entries(marks, k[3], '') -- a live mark without a turn yet (the next script gives it one)
  for _, m in ipairs(marks) do
    if not seen[m[1]] then
      writers[#writers + 1] = m
    end
  end
  local readers = {}
  live_entries(readers, k[4], 'r')
  -- The order of service (lib/rw.lua): the admitted readers first; the waiting readers are
  -- admitted by the next writer's Unlock: before the first waiting writer if a writer holds,
  -- after it otherwise.
  local queue = {}
  live_entries(queue, k[5], 'a')
  local first = 1
  if redis.call('EXISTS', k[1]) == 0 and writers[1] then
    queue[#queue + 1] = writers[1]
    first = 2
  end
  for _, r in ipairs(readers) do
    queue[#queue + 1] = r
  end
  for i = first, #writers do
    queue[#queue + 1] = writers[i]
  end
  return {holders, queue, fence_of(k[6]), {}}
end

read.semaphore = function(k)
  local holders = {}
  zset_holders(holders, k[1], now_ms, 0, k[2])
  local in_use = 0
  for _, h in ipairs(holders) do
    in_use = in_use + h[4]
  end
  local queue = {}
  local e = redis.call('ZRANGE', k[3], 0, -1, 'WITHSCORES')
  for i = 1, #e, 2 do
    local left = ms(redis.call('ZSCORE', k[4], e[i]))
    if left then
      local n = tonumber(redis.call('HGET', k[5], e[i]) or '1') or 0
      queue[#queue + 1] = {e[i], left, waited(e[i + 1]), n, '', ''}
    end
  end
  local size = redis.pcall('GET', k[6])
  size = type(size) == 'string' and tonumber(size) or 0
  return {holders, queue, 0, {size, in_use}}
end

read.waitgroup = function(k)
  local members = {}
  zset_holders(members, k[2], now_ms, 0, nil)
  for _, m in ipairs(members) do
    m[5] = 0 -- a member, not a read hold
  end
  local units, round, open, lost, err = 0, '', 0, 0, ''
  local outcomes = {}
  local f = redis.call('HGETALL', k[1])
  for i = 1, #f, 2 do
    local name, v = f[i], f[i + 1]
    if name == 'n' then
      local n = tonumber(v)
      if n and n >= 1 and n < 2^53 and n == math.floor(n) then -- as lib/waitgroup.lua's units()
        units = n
      end
    elseif name == 'r' then
      round = v
    elseif name == 'open' then
      open = v == '1' and 1 or 0
    elseif name == 'lost' then
      lost = tonumber(v) or 0
    elseif name == 'err' then
      err = v
    elseif string.sub(name, 1, 2) == 'o:' then
      outcomes[#outcomes + 1] = string.sub(name, 3)
      outcomes[#outcomes + 1] = v
    end
  end
  local extra = {units, round, open, lost, err}
  for _, v in ipairs(outcomes) do
    extra[#extra + 1] = v
  end
  return {members, {}, 0, extra}
end

read.once = function(k)
  local holders = {}
  exclusive_holder(holders, k[1], k[3]) -- every lead takes the next token: the last is the leader's
  local status = redis.pcall('GETRANGE', k[2], 0, 0) -- the status byte, not the whole result
  local kept = -2
  if type(status) ~= 'string' then
    status = ''
  elseif status ~= '' then
    kept = redis.call('PTTL', k[2])
  end
  return {holders, {}, fence_of(k[3]), {status, kept}}
end

-- rate: lib/rate.lua's bucket, read as rate_tokens.lua reads it, but with no caller's
-- settings: only the stored ones. (lib/rate.lua's ARGV table reads this script's kinds as
-- its arguments; nothing here uses it.)
read.rate = function(k)
  local v = redis.call('HMGET', k[1], 'tokens', 'last', 'event', 'limit', 'burst')
  local tokens, last, event = tonumber(v[1]), tonumber(v[2]), tonumber(v[3]) or 0
  if not tokens or not last then
    return {{}, {}, 0, {}} -- not a bucket this version wrote
  end
  local now_tokens = ''
  if v[4] and v[5] then
    now_tokens = flt(advance({tokens = tokens, last = last, limit = limit_of(v[4]), burst = tonumber(v[5])}, now_us))
  end
  return {{}, {}, 0, {flt(tokens), int(math.max(0, now_us - last)), v[4] or '', v[5] or '', now_tokens,
    int(math.max(0, event - now_us))}}
end

local reply = {}
local at = 0
for i, kind in ipairs(ARGV) do
  local n = nkeys[kind]
  if not n then
    return redis.error_reply('inspect.lua: unknown kind ' .. tostring(kind))
  end
  if at + n > #KEYS then
    return redis.error_reply('inspect.lua: too few keys for ' .. kind)
  end
  local k = {}
  for j = 1, n do
    k[j] = KEYS[at + j]
  end
  at = at + n
  local exists = redis.call('EXISTS', unpack(k))
  local r = {exists, {}, {}, 0, {}}
  if exists > 0 then
    local got = read[kind](k)
    r = {exists, got[1], got[2], got[3], got[4]}
  end
  reply[i] = r
end
if at ~= #KEYS then
  return redis.error_reply('inspect.lua: more keys than the kinds take')
end
return reply
