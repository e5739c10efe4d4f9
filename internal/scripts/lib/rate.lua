-- lib/rate.lua: the state of a rate limiter, shared by its scripts: a token bucket in one
-- hash, with golang.org/x/time/rate's arithmetic (tokens refill at limit per second up to
-- burst; a reservation takes its tokens at once, below zero if need be, and waits until the
-- bucket would have had them). Time is the server's (lib/clock.lua), in microseconds.
--
-- KEYS, the same for every rate script:
--   [1] bucket  hash: tokens (a float), last (µs: when tokens was right), event (µs: the
--               latest time to act reserved), and, only once SetLimit or SetBurst stored them,
--               limit and burst: the settings of every process, over their own
-- ARGV, the same for every rate script:
--   [1] limit (the caller's own: tokens per second, or 'inf')   [2] burst (the caller's own)
--   [3] n tokens   [4] max_wait µs, or 'inf'   [5] retention ms
--   [6] at µs (a reservation's time to act)   [7] rlimit (the limit it was made under)
--   [8] new_limit ('' to keep)   [9] new_burst ('' to keep)
-- Each script reads the ARGV it names and ignores the rest.
--
-- The bucket expires when it would be full again and no reservation is still ahead: a full
-- bucket and a missing one mean the same, so nothing is lost. Once it holds settings, it lives
-- for retention after the last script that touched it instead (and until it is full):
-- settings are forgotten a retention after the limiter's last use, and the callers' own
-- apply again. A script reads the bucket before the clock (begin): Redis judges a key's
-- expiry by the script's start, miniredis by the time of the command that reads it, both no
-- later than a TIME read after it, so a bucket found gone is full by the script's now (read
-- first, a stalled script could find it gone at a later time than its now). Nothing waits for
-- anything in Redis: a reservation's waiting is its caller's timer.
--
-- Requires lib/clock.lua (now, int).

local A = {limit = ARGV[1], burst = tonumber(ARGV[2]), n = tonumber(ARGV[3]), max_wait = ARGV[4],
  retention = tonumber(ARGV[5]), at = tonumber(ARGV[6]), rlimit = ARGV[7], new_limit = ARGV[8],
  new_burst = ARGV[9]}

-- limit_of() returns a limit as a number: math.huge for 'inf'.
local function limit_of(s)
  if s == 'inf' then
    return math.huge
  end
  return tonumber(s)
end

-- flt() formats a float so that tonumber gives it back within 1e-17, as a plain decimal:
-- miniredis's Lua reads no negative exponent.
local function flt(x)
  if x == math.huge then
    return 'inf'
  end
  return string.format('%.17f', x)
end

-- load() returns the bucket: tokens, last and event (nil when there is no bucket), the
-- stored settings (hlimit, hburst: nil when not stored), the limit and burst in force (the
-- stored settings, else the caller's) and whether settings are stored.
local function load()
  local v = redis.call('HMGET', KEYS[1], 'tokens', 'last', 'event', 'limit', 'burst')
  local b = {tokens = tonumber(v[1]), last = tonumber(v[2]), event = tonumber(v[3]) or 0,
    hlimit = v[4] or nil, hburst = v[5] or nil}
  b.stored = (b.hlimit or b.hburst) and true or false
  b.slimit, b.sburst = b.hlimit or A.limit, b.hburst or ARGV[2]
  b.limit, b.burst = limit_of(b.slimit), tonumber(b.sburst)
  return b
end

-- store() makes settings part of bucket b, for save() to write: a new limit or burst ('' to
-- keep the one in force).
local function store(b, limit, burst)
  if limit ~= '' then
    b.hlimit, b.slimit, b.limit = limit, limit, limit_of(limit)
  end
  if burst ~= '' then
    b.hburst, b.sburst, b.burst = burst, burst, tonumber(burst)
  end
  b.stored = true
end

-- begin() returns the bucket (load) and the server time in µs, read in that order (above).
local function begin()
  local b = load()
  local _, t = now()
  return b, t
end

-- advance() returns the tokens of bucket b at time now (x/time/rate's advance): a missing
-- bucket is full; an infinite limit fills it in any time at all.
local function advance(b, now)
  if not b.tokens then
    return b.burst
  end
  local elapsed = math.max(0, now - b.last)
  local tokens = b.tokens
  if elapsed > 0 and b.limit > 0 then
    if b.limit == math.huge then
      tokens = b.burst
    else
      tokens = tokens + elapsed * b.limit / 1e6
    end
  end
  return math.min(tokens, b.burst)
end

-- save() writes bucket b (its tokens at now, its latest time to act, its stored settings) in
-- one HSET, and sets its TTL: until it is full again and past event (a full bucket and a
-- missing one are the same); with stored settings, or a limit that never refills it,
-- retention, but never less than until it is full. In whole milliseconds, rounded up: Redis
-- counts a TTL from its command time in whole milliseconds (at or after now's) and takes a key
-- for gone only in a later millisecond; miniredis counts it from its own command time, after
-- now. At most 1e12 ms (31 years): miniredis holds a TTL in a time.Duration (292 years at
-- most). Redis expires no key while a script runs; miniredis does, by each command's time,
-- so a key whose old TTL ran out after the HSET is gone at the PEXPIRE (which then returns 0):
-- written again, it is a new key without a TTL, and the PEXPIRE finds it.
local function save(b, tokens, now, event)
  local us = A.retention * 1000
  if b.limit > 0 then
    local full = math.max(math.max(0, b.burst - tokens) / b.limit * 1e6, event - now)
    if b.stored then
      us = math.max(us, full)
    else
      us = full
    end
  end
  local ms = math.floor(math.min(us, 1e15) / 1000) + 1
  local fields = {'tokens', flt(tokens), 'last', int(now), 'event', int(event)}
  if b.hlimit then
    fields[#fields + 1], fields[#fields + 2] = 'limit', b.hlimit
  end
  if b.hburst then
    fields[#fields + 1], fields[#fields + 2] = 'burst', b.hburst
  end
  for _ = 1, 2 do
    redis.call('HSET', KEYS[1], unpack(fields))
    if redis.call('PEXPIRE', KEYS[1], ms) == 1 then
      return
    end
  end
end

-- settings() returns the limit and burst in force, as strings, for a reply.
local function settings(b)
  return b.slimit, b.sburst
end
