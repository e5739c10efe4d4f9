-- lib/waitgroup.lua: the state of a wait group, shared by its scripts (included by them, never
-- run alone).
--
-- KEYS, the same for every waitgroup script:
--   [1] s    the group, a hash:
--              n        plain units (Add), not leased
--              r        the round: the open one, or the last that ended
--              open     '1' while round r is open (pending > 0), '0' once it ended
--              lost     members lost in the open round so far
--              err      the open round's first member error (Fail)
--              first    the first round this hash held: older rounds were in keys that vanished
--              o:<r>    the outcome of ended round r, '<lost>\n<err>', for the last `keep` rounds
--   [2] m    members: zset member id -> lease expiry (ms, server clock); each counts one
--   [3] ops  request ids applied or voided (lib/ops.lua)
-- ARGV, the same for every waitgroup script:
--   [1] id       request id (Add) or member id
--   [2] delta    Add's delta
--   [3] ttl      a member's lease, ms
--   [4] expiry   ms the keys live after the last change (at least as long as every member)
--   [5] keep     how many ended rounds' outcomes are kept
--   [6] channel  the group's channel    [7] pub  'PUBLISH' or 'SPUBLISH'
--   [8] ops_ttl  ms a request id is remembered    [9] extra  (per script)
--
-- pending = n + ZCARD(m). A round opens when pending leaves 0 and ends when it comes back to 0;
-- its end is published, '<round>\n<lost>\n<err>', to every waiting process at once. A member
-- whose lease lapsed (its process died or was cut off: it stopped renewing) is dropped by the
-- next script that runs, whichever it is, and counted as lost: never as done.
--
-- Round numbers grow by one per round. A hash made afresh (the first round, or after the keys
-- vanished) starts from the server clock in µs, so that a round number is never reused for
-- another round while a waiter might still ask about it.
--
-- Requires lib/clock.lua and lib/ops.lua.

local K = {s = KEYS[1], m = KEYS[2], ops = KEYS[3]}
local A = {id = ARGV[1], delta = tonumber(ARGV[2]), ttl = tonumber(ARGV[3]), expiry = tonumber(ARGV[4]),
  keep = tonumber(ARGV[5]), ch = ARGV[6], pub = ARGV[7], ops_ttl = tonumber(ARGV[8]), extra = ARGV[9]}

-- units() returns the plain units: a count a script wrote, else 0 (never one that goes below 0).
local function units()
  local n = tonumber(redis.call('HGET', K.s, 'n') or '0')
  if n and n >= 1 and n < 2^53 and n == math.floor(n) then
    return n
  end
  return 0
end

local function pending()
  return units() + redis.call('ZCARD', K.m)
end

local function is_open()
  return redis.call('HGET', K.s, 'open') == '1'
end

-- round() returns the round, the open one or the last that ended, as a number (0 for none;
-- rounds, server µs, stay below 2^53): what a process that adds to the group took part in.
local function round()
  return tonumber(redis.call('HGET', K.s, 'r') or '0') or 0
end

-- touch() makes the keys live expiry ms from now, and at least until the last member's lease
-- ends (renewals then keep them, extend.lua). Called after every change.
local function touch(now_ms)
  local ms = A.expiry
  local last = redis.call('ZRANGE', K.m, -1, -1, 'WITHSCORES')
  if last[1] then
    ms = math.max(ms, (tonumber(last[2]) or 0) - now_ms)
  end
  redis.call('PEXPIRE', K.s, ms)
  redis.call('PEXPIRE', K.m, ms)
end

-- open_round() starts the next round; pending has just left 0.
local function open_round(now_us)
  local r = tonumber(redis.call('HGET', K.s, 'r') or '')
  local round
  if r then
    round = int(r + 1)
  else
    round = int(now_us)
    redis.call('HSET', K.s, 'first', round)
  end
  redis.call('HSET', K.s, 'r', round, 'open', '1', 'lost', '0')
  redis.call('HDEL', K.s, 'err')
end

-- end_round() ends the open round, whose pending is 0: its outcome is kept and published.
local function end_round()
  local r = redis.call('HGET', K.s, 'r')
  local o = (redis.call('HGET', K.s, 'lost') or '0') .. '\n' .. (redis.call('HGET', K.s, 'err') or '')
  redis.call('HSET', K.s, 'o:' .. r, o, 'open', '0')
  redis.call('HDEL', K.s, 'o:' .. int(tonumber(r) - A.keep), 'lost', 'err')
  redis.call(A.pub, A.ch, r .. '\n' .. o)
end

-- settle() drops the members whose lease lapsed, counting each as lost in the open round, and
-- ends the round if pending is 0 (a round left open at 0 by a hand-edited key ends here too,
-- rather than keep its waiters until the keys expire). It reports whether it changed anything.
local function settle(now_ms)
  local gone = redis.call('ZREMRANGEBYSCORE', K.m, '-inf', now_ms)
  if not is_open() then
    return gone > 0
  end
  if gone > 0 then
    redis.call('HINCRBY', K.s, 'lost', gone)
  end
  if pending() == 0 then
    end_round()
    return true
  end
  return gone > 0
end
