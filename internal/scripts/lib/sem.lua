-- lib/sem.lua: the state of a weighted semaphore, shared by its scripts.
--
-- KEYS, the same for every semaphore script:
--   [1] h     holders: zset owner -> lease expiry (ms, server clock)
--   [2] n     holders: hash owner -> permits held
--   [3] q     waiters: zset waiter id -> arrival (µs); the order in which permits are served
--   [4] qx    waiters: zset waiter id -> waiter lease expiry (ms); '!'..id -> voided waiter
--   [5] qn    waiters: hash waiter id -> permits requested
--   [6] size  the semaphore's size: part of its identity
--   [7] ops   request ids applied (lib/ops.lua), so that a retried release counts once
-- ARGV, the same for every semaphore script:
--   [1] id (waiter id, or a holder's owner value)   [2] n permits   [3] size   [4] ttl ms
--   [5] wlease ms (a waiter's lease, and how long granted permits wait for their confirm)
--   [6] slack ms   [7] channel prefix (lib/queue.lua)   [8] pub   [9] ops_ttl ms
--   [10] extra: '1' for a try (acquire); the request id (release)
-- An owner is a waiter id whose call took permits itself, or '~'..id for permits granted to
-- waiter id by another call. Lapsed holders and waiters are dropped before anything is decided.
--
-- Cost, in Redis calls per script: O(log w) in the number of waiters w, and O(h) in the
-- holders h, which are at most the size (every holder, or grant awaiting its confirm, has a
-- permit or more). Lapsed entries are dropped once each, by whichever script meets them first,
-- and each waiter served is one O(log w) removal; a take or a release that nobody waits for
-- neither sums the holders nor walks the queue.
--
-- Messages (lib/queue.lua): 'g <n>  <ms> <id>' grants n permits to waiter id for ms (no
-- backup); 'w <ms> <id>' tells the head to watch grants made ahead of it; 'x <ms> <id>' tells
-- the head that its request would fit in ms if no holder renewed (or released) again.
--
-- Requires lib/clock.lua and lib/queue.lua (tell).

local K = {h = KEYS[1], n = KEYS[2], q = KEYS[3], qx = KEYS[4], qn = KEYS[5], size = KEYS[6], ops = KEYS[7]}
local A = {id = ARGV[1], n = tonumber(ARGV[2]), size = tonumber(ARGV[3]), ttl = tonumber(ARGV[4]),
  wlease = tonumber(ARGV[5]), slack = tonumber(ARGV[6]), prefix = ARGV[7], pub = ARGV[8],
  ops_ttl = tonumber(ARGV[9]), extra = ARGV[10]}

-- permits() returns s as a number of permits: an integer >= 1 that a Lua number holds
-- exactly. Anything else (negative, zero, fractional, inf, nan, not a number) is nil: no count
-- the scripts wrote, and never one that makes room for permits that are not there.
local function permits(s)
  local n = tonumber(s)
  if n and n >= 1 and n < 2^53 and n == math.floor(n) then
    return n
  end
  return nil
end

-- size_in_redis() returns the size Redis has, or nil (none, or not a size).
local function size_in_redis()
  local s = redis.call('GET', K.size)
  return s and permits(s)
end

-- claim_size() makes the caller's size the semaphore's if it has none; it returns false and
-- the size in Redis if they differ.
local function claim_size()
  local cur = size_in_redis()
  if cur and cur ~= A.size then
    return false, cur
  end
  if cur then
    live_for(K.size, A.ttl + A.wlease + A.slack)
  else
    redis.call('SET', K.size, A.size, 'PX', A.ttl + A.wlease + A.slack)
  end
  return true
end

-- prune() drops holders whose lease lapsed and returns the permits in use, and the holders
-- left: owner -> permits (an owner that holds none is absent).
local function prune(now_ms)
  redis.call('ZREMRANGEBYSCORE', K.qx, '-inf', now_ms) -- lapsed places and void marks
  for _, o in ipairs(redis.call('ZRANGEBYSCORE', K.h, '-inf', now_ms)) do
    redis.call('ZREM', K.h, o)
    redis.call('HDEL', K.n, o)
  end
  local used = 0
  local held = {}
  local counts = redis.call('HGETALL', K.n)
  for i = 1, #counts, 2 do
    local c = permits(counts[i + 1])
    if c then
      used = used + c
      held[counts[i]] = c
    else
      -- Not a count of permits: no hold a script made. Counted, a negative one would make
      -- room for permits that are not there.
      redis.call('HDEL', K.n, counts[i])
      redis.call('ZREM', K.h, counts[i])
    end
  end
  return used, held
end

-- hold() records owner as holding n permits for ms. sized: the caller ran claim_size(), which
-- made the size live longer than the hold already. first: prune() found no holder, so n is
-- new, and h holds nobody who holds permits: both are given ms without reading their TTLs.
local function hold(owner, n, now_ms, ms, sized, first)
  redis.call('HSET', K.n, owner, n)
  redis.call('ZADD', K.h, now_ms + ms, owner)
  if first then
    redis.call('PEXPIRE', K.h, ms)
    redis.call('PEXPIRE', K.n, ms)
  else
    live_for(K.h, ms)
    live_for(K.n, ms)
  end
  if not sized then
    live_for(K.size, ms + A.slack)
  end
end

local function dequeue(w)
  redis.call('ZREM', K.q, w)
  redis.call('ZREM', K.qx, w)
  redis.call('HDEL', K.qn, w)
end

-- head() returns the first waiter whose lease has not lapsed, dropping the lapsed ones.
local function head(now_ms)
  for _ = 1, 1000 do
    local w = redis.call('ZRANGE', K.q, 0, 0)[1]
    if not w or tonumber(redis.call('ZSCORE', K.qx, w) or '0') > now_ms then
      return w
    end
    dequeue(w)
  end
end

-- fits_in() returns the ms from now until short more permits come back if no holder renews
-- (or releases) again: the holders' leases run out in the order of their expiries, each
-- giving back its permits, so the request fits at the expiry of the holder that makes up
-- short. nil if it never would: the holders hold fewer than short (the semaphore shrank below
-- the request), or that holder's lease has no end a script wrote (+inf). Lapsed holders must
-- have been pruned. It reads the holders in order, 64 at a time, and stops at that holder:
-- O(h) at most.
local function fits_in(now_ms, short)
  local from = 0
  while true do
    local hs = redis.call('ZRANGE', K.h, from, from + 63, 'WITHSCORES')
    if not hs[1] then
      return nil
    end
    local owners = {}
    for i = 1, #hs, 2 do
      owners[#owners + 1] = hs[i]
    end
    local counts = redis.call('HMGET', K.n, unpack(owners))
    for j = 1, #owners do
      short = short - (permits(counts[j]) or 0)
      if short <= 0 then
        local at = tonumber(hs[2 * j])
        if not at or at >= 2^53 then
          return nil
        end
        -- At least 1 ms (a notice of 0 is malformed), at most about 24 days (a reply and a
        -- notice the client can hold: no lease a script wrote is that long).
        return math.min(math.max(at - now_ms, 1), 2^31 - 1)
      end
    end
    from = from + 64
  end
end

-- serve() hands free permits to the waiters at the head of the queue, in order, while the
-- head's request fits; used() gives the permits in use, and is called only if someone waits.
-- A request that does not fit stops the walk, as in x/sync/semaphore: later, smaller
-- requests must not overtake it, or a large one could wait forever. The
-- calling waiter (self) takes its permits as its own, for its lease; any other is granted
-- them as '~'..id for a waiter lease, until it confirms, and told. If a grant was made and a
-- head is left waiting, that head is told to watch: a grantee that died gives its permits
-- back after the waiter lease, and publishes nothing then.
--
-- The head left waiting is also told when its request would fit if no holder renewed again
-- (fits_in(): 'x <ms> <id>'), or, if it is self, that is returned (nil otherwise). It
-- re-checks just after that, and not before, unless told again: every holder's renewal
-- (semaphore_renew.lua) serves and tells it too, and a renewal only pushes that moment
-- later. Permits come back by themselves (a lease runs out) publishing nothing; this is how
-- the head is there a round trip after they do, while it sends nothing as long as the
-- holders renew.
local function serve(now_ms, used, self)
  local free
  local granted = false
  for _ = 1, 1000 do
    local w = head(now_ms)
    if not w then
      return
    end
    if not free then
      free = (size_in_redis() or A.size) - used() -- read once, when someone waits
    end
    local need = permits(redis.call('HGET', K.qn, w) or '1')
    if not need then
      dequeue(w) -- no request a script queued: it would take permits that are not there
    elseif need > free then
      if granted and w ~= self then
        tell(A.pub, A.prefix, w, 'w ' .. A.wlease)
      end
      local fit = fits_in(now_ms, need - free)
      if w == self then
        return fit
      end
      if fit then
        tell(A.pub, A.prefix, w, 'x ' .. int(fit))
      end
      return
    else
      dequeue(w)
      free = free - need
      if w == self then
        hold(self, need, now_ms, A.ttl, true)
      else
        hold('~' .. w, need, now_ms, A.wlease)
        tell(A.pub, A.prefix, w, 'g ' .. need .. '  ' .. A.wlease) -- no backup: 'g <n>  <ms> <id>'
        granted = true
      end
    end
  end
end

-- wait() returns the ms until permits could come back by themselves: the earliest lease.
-- (A head whose place lapses publishes nothing either; the next script that runs drops it, and
-- a waiter behind it re-checks by this backstop at the latest, not at every waiter lease, so
-- that idle waiters stay quiet.)
local function wait(now_ms)
  local e = redis.call('ZRANGE', K.h, 0, 0, 'WITHSCORES')
  if e[1] then
    -- At most a lease: a holder renews within one anyway, and a lease of +inf (which no
    -- script writes) must not become an overflowing reply, that is a re-check at once.
    return math.min(math.max((tonumber(e[2]) or math.huge) - now_ms, 0), A.ttl)
  end
  return A.wlease
end
