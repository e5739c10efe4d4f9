-- fair_acquire.lua: take a fair (FIFO) lock if it is this waiter's turn, or queue the waiter.
--
-- KEYS[1] lock   the holder's owner value: a waiter id, or '~<waiter>:<token>' for a grant
-- KEYS[2] fence  last fencing token of the name
-- KEYS[3] q      queue: waiter id -> arrival (µs, server clock); the order of the lock
-- KEYS[4] qx     waiter id -> waiter lease expiry (ms); '!'..id -> voided attempt
-- ARGV[1] waiter     this call's waiter id, '<process>/<call>'; also the owner value of a take
-- ARGV[2] ttl        lease in ms
-- ARGV[3] fence_ttl  ms the fence key outlives the last acquisition
-- ARGV[4] wlease     ms the waiter's entry lives unless renewed; also how long a grant lasts
-- ARGV[5] try        '1': TryLock, never queue
-- ARGV[6] prefix     channel prefix (lib/queue.lua)
-- ARGV[7] pub        'PUBLISH' or 'SPUBLISH'
-- ARGV[8] backup     the waiters watching a grant to this waiter, comma-separated ('' if none), told when it is taken
-- ARGV[9] slack      ms the queue outlives the lease it waits behind
-- With a record of the holder (election, see lib/queue.lua), also:
-- KEYS[5] values     the record's values hash
-- ARGV[10] observers the observers' channel
-- ARGV[11] ttl       the lease in ms (ARGV[2])
-- ARGV[12] value     this waiter's value, announced once it holds the lock (election_renew.lua)
-- Reply: {1, token}            held
--        {0, pttl, granted, first}  queued (or, for a try, not taken): the lock ends in pttl
--                              ms unless renewed; granted = 1 if it is an unconfirmed grant;
--                              first = 1 if the waiter heads the queue (each renewal of the
--                              hold tells it when the lease now ends: mutex_renew.lua,
--                              election_renew.lua)
--        {-1}                  the waiter gave up (fair_leave.lua voided it): nothing done
--
-- Strict FIFO: a free lock goes to the first waiter whose entry has not lapsed, never to a
-- caller behind it. The call is idempotent for one waiter id: sent again after a lost reply,
-- it finds the lock its own, or its place in the queue kept.

-- #include lib/clock.lua
-- #include lib/fence.lua

local lock, fence, q, qx = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local w, ttl, wlease = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[4])
-- The fast path: nobody queued (no q, so the caller has no place either), the lock free. It
-- comes before lib/queue.lua is included, so that it does not pay for making the queue's
-- functions (a Lua closure each, every run). A lock that is not free, a retry of a take or a
-- grant to adopt, goes on below. A waiter voided by fair_leave.lua does nothing: the fast path
-- looks for the void mark only if the fence says that one may be live (taken, lib/fence.lua);
-- every other path looks here.
if not KEYS[5] and redis.call('EXISTS', q) == 0 and redis.call('SET', lock, w, 'NX', 'PX', ttl) then
  return taken(lock, fence, ARGV[3], qx, w, {-1})
end
if redis.call('ZSCORE', qx, '!' .. w) then
  return {-1}
end

-- #include lib/queue.lua

local rec = record(5, 10)
if rec then
  redis.call('HSET', rec.values, w, ARGV[12])
  live_for(rec.values, rec.live)
end
-- A holder's value has a '+' after it once a waiter queued behind it (as a mutex's: its
-- release, mutex_release.lua, hands the lock on then); an election's never has.
local cur = redis.call('GET', lock)
if cur == w or cur == w .. '+' then
  -- A retry of a take that went through. It writes (the lease from now), as every reply that
  -- reports a claim does: a WAIT after it (distsync.WithReplicaAck) then waits for the take.
  if redis.call('PEXPIRE', lock, ttl) == 1 then
    return {1, tonumber(redis.call('GET', fence) or 0)}
  end
  cur = false -- the hold expired after the GET (miniredis only: extend.lua): the lock is free
end
if cur and granted_to(cur, w) then
  -- A grant whose message the waiter missed, or could not use in time: adopt it.
  redis.call('SET', lock, w, 'PX', ttl)
  if not rec and redis.call('EXISTS', q) == 1 then
    mark_waited(lock, w)
  end
  if ARGV[8] ~= '' then
    tell_each(ARGV[7], ARGV[6], ARGV[8], 'c')
  end
  return {1, tonumber(string.sub(cur, #w + 3))}
end
local now_ms, now_us = now()
redis.call('ZREMRANGEBYSCORE', qx, '-inf', now_ms) -- lapsed places and void marks
if not cur then
  -- The first waiter whose entry is live goes first; lapsed entries are dropped.
  local head
  for _ = 1, 1000 do
    head = redis.call('ZRANGE', q, 0, 0)[1]
    if not head or head == w or tonumber(redis.call('ZSCORE', qx, head) or '0') > now_ms then
      break
    end
    redis.call('ZREM', q, head)
    redis.call('ZREM', qx, head)
    forget(rec, head)
  end
  if not head or head == w then
    local token = next_token(fence, ARGV[3], now_us)
    if not token then
      return no_token(fence)
    end
    redis.call('SET', lock, w, 'PX', ttl)
    redis.call('ZREM', q, w)
    redis.call('ZREM', qx, w)
    if not rec and redis.call('EXISTS', q) == 1 then
      mark_waited(lock, w)
    end
    return {1, token}
  end
  pass_on(lock, fence, q, qx, ARGV[4], ARGV[3], ARGV[6], ARGV[7], rec)
  cur = redis.call('GET', lock)
end
local pttl = redis.call('PTTL', lock)
if pttl == -2 then
  pttl = 0 -- expired since it was read (miniredis's clock moves within a script): look again at once
elseif pttl < 0 then
  pttl = ttl
end
local g = 0
if cur and string.sub(cur, 1, 1) == '~' then
  g = 1
end
if ARGV[5] ~= '1' then
  redis.call('ZADD', q, 'NX', now_us, w)
  redis.call('ZADD', qx, now_ms + wlease, w)
  live_for(q, pttl + tonumber(ARGV[9]) + wlease)
  live_for(qx, pttl + tonumber(ARGV[9]) + wlease)
  if not rec then
    mark_waited(lock, cur)
  end
  if rec then
    -- Again: a pass_on() above may have unseated another holder, and dropped this waiter's
    -- value as the holder it replaced (a grant to this waiter that lapsed).
    redis.call('HSET', rec.values, w, ARGV[12])
    live_for(rec.values, pttl + tonumber(ARGV[9]) + wlease)
  end
elseif rec then
  forget(rec, w)
end
local first = 0
if ARGV[5] ~= '1' and g == 0 and redis.call('ZRANGE', q, 0, 0)[1] == w then
  first = 1
end
return {0, pttl, g, first}
