-- lib/rw.lua: the state of a read-write mutex, shared by its scripts.
--
-- KEYS, the same for every rwmutex script:
--   [1] w      the writer's claim: a string, the writer's owner value, PX its lease
--   [2] r      the readers: zset owner -> lease expiry (ms, server clock); one member per RLock
--   [3] ww     writers waiting: zset waiter id -> mark expiry. While it is not empty, readers
--              that are not admitted wait: that is the writer preference of sync.RWMutex.
--   [4] rq     readers waiting: zset waiter id -> mark expiry
--   [5] ra     readers admitted: zset waiter id -> expiry. A writer's Unlock admits every
--              reader then waiting (rq -> ra) before the next writer, as sync.RWMutex lets
--              the readers blocked by a writer in before the next writer; writers wait for them.
--   [6] fence  last fencing token (lib/fence.lua)
--   [7] ops    voided attempts (lib/ops.lua)
--   [8] wo     the order of the waiting writers: zset waiter id -> arrival (µs, server clock).
--              A free lock goes to the first writer in it whose mark in ww is live, so that
--              writers of different processes are served in turn, never overtaken without
--              bound; an entry whose mark lapsed (its writer stopped re-checking) is dropped.
--   [9] rel    the owner values of the last releases, for a lease: a retried release that
--              finds its claim gone knows whether an earlier attempt released it (lib/rel.lua)
-- ARGV, the same for every rwmutex script:
--   [1] mode 'r' (reader) or 'w' (writer)   [2] owner   [3] waiter id ('' for none)
--   [4] more ('1': other goroutines of the waiter's process still wait)   [5] ttl ms
--   [6] slack ms (how long a waiting mark outlives the wait it reported)
--   [7] window ms (how long an admission lasts)   [8] fence_ttl ms   [9] ops_ttl ms
--   [10] channel prefix: readers listen on prefix..':r', writers on prefix..':w'   [11] pub
-- Every mark and lease lapses by itself: a crashed reader's share, a crashed writer's mark,
-- an admitted reader that never came. Scripts drop lapsed entries before they decide.
--
-- Messages: 'r' on the readers' channel and 'w' on the writers' ask every waiting process to
-- look again. 'x <ms> *' on the readers' channel tells every waiting reader that the write hold
-- it waits behind now ends in ms; 'x <ms> <waiter>' on the writers' channel tells the first
-- waiting writer that what it waits behind (the write hold, or the read shares and
-- admissions) now ends in ms. A lease that runs out publishes nothing: these, sent by every
-- renewal (rwmutex_renew.lua), let a waiter re-check right after it does, and not before.
--
-- Requires lib/clock.lua.

local K = {w = KEYS[1], r = KEYS[2], ww = KEYS[3], rq = KEYS[4], ra = KEYS[5], fence = KEYS[6], ops = KEYS[7],
  wo = KEYS[8], rel = KEYS[9]}
local A = {mode = ARGV[1], owner = ARGV[2], waiter = ARGV[3], more = ARGV[4] == '1',
  ttl = tonumber(ARGV[5]), slack = tonumber(ARGV[6]), window = tonumber(ARGV[7]),
  fence_ttl = ARGV[8], ops_ttl = tonumber(ARGV[9]), ch = ARGV[10], pub = ARGV[11]}

local function prune(now_ms)
  for _, z in ipairs({K.r, K.ww, K.rq, K.ra}) do
    redis.call('ZREMRANGEBYSCORE', z, '-inf', now_ms)
  end
end

-- left() returns the ms until the last entry of zset z lapses, or -1 if z is empty.
local function left(z, now_ms)
  local e = redis.call('ZRANGE', z, -1, -1, 'WITHSCORES')
  if e[1] then
    return math.max(tonumber(e[2]) - now_ms, 0)
  end
  return -1
end

-- writer_left() returns the ms the writer's lease has left, or -1 if no writer holds.
local function writer_left()
  local pt = redis.call('PTTL', K.w)
  if pt == -1 then
    return A.ttl -- no expiry: cannot happen, but do not wait forever on it
  end
  return pt < 0 and -1 or pt
end

-- mark() registers the caller's waiter id in zset z for as long as its wait plus slack.
local function mark(z, now_ms, wait)
  if A.waiter ~= '' then
    redis.call('ZADD', z, now_ms + wait + A.slack, A.waiter)
    live_for(z, wait + A.slack)
  end
end

-- first_writer() returns the waiting writer whose turn it is (the oldest with a live mark), or
-- nil if no writer waits; entries whose marks lapsed are dropped.
local function first_writer(now_ms)
  for _ = 1, 1000 do
    local id = redis.call('ZRANGE', K.wo, 0, 0)[1]
    if not id then
      return nil
    end
    if tonumber(redis.call('ZSCORE', K.ww, id) or '0') > now_ms then
      return id
    end
    redis.call('ZREM', K.wo, id)
  end
end

-- queue_writer() puts the caller's waiter id in the writers' order: at the tail, or, if tail is
-- false, where it is if it is there already.
local function queue_writer(now_us, wait, tail)
  if A.waiter ~= '' then
    if tail then
      redis.call('ZADD', K.wo, now_us, A.waiter)
    else
      redis.call('ZADD', K.wo, 'NX', now_us, A.waiter)
    end
    live_for(K.wo, wait + A.slack)
  end
end

-- after_write() runs when the writer's claim is gone: the readers that wait are admitted and
-- told, ahead of the next writer; if none wait, the writers are told. (A publish nobody
-- listens to costs Redis next to nothing; a writer's waiting mark may have lapsed while it
-- was not re-checking, so writers are told whether or not ww holds a mark.)
local function after_write(now_ms)
  local waiting = redis.call('ZRANGE', K.rq, 0, -1)
  if #waiting > 0 then
    for _, id in ipairs(waiting) do
      redis.call('ZADD', K.ra, now_ms + A.window, id)
    end
    live_for(K.ra, A.window)
    redis.call('DEL', K.rq)
    redis.call(A.pub, A.ch .. ':r', 'r')
    -- Writers are told too: they look again, and wait for the admitted readers no longer
    -- than the admission lasts, should those never come.
    redis.call(A.pub, A.ch .. ':w', 'w')
  else
    redis.call(A.pub, A.ch .. ':w', 'w')
  end
end

-- tell_writer() tells the first waiting writer, if any, that what it waits behind now ends in
-- ms ('x <ms> <waiter>'): it re-checks just after that, not before.
local function tell_writer(now_ms, ms)
  local first = first_writer(now_ms)
  if first and ms < 2^31 then -- no lease a script wrote is that long: leave it to the backstop
    redis.call(A.pub, A.ch .. ':w', 'x ' .. int(math.max(ms, 1)) .. ' ' .. first)
  end
end

-- shares_left() returns the ms until the last live share or admission lapses (-1: none).
local function shares_left(now_ms)
  return math.max(left(K.r, now_ms), left(K.ra, now_ms))
end

-- after_read() runs when a reader's share or admission is gone: if it was the last, a
-- waiting writer is told to look again; if not, the first waiting writer is told when the
-- last of the others now lapses (the one that went may have been the last to).
local function after_read(now_ms)
  if redis.call('EXISTS', K.r) == 0 and redis.call('EXISTS', K.ra) == 0 then
    redis.call(A.pub, A.ch .. ':w', 'w')
  elseif redis.call('EXISTS', K.ww) == 1 then
    tell_writer(now_ms, shares_left(now_ms))
  end
end
