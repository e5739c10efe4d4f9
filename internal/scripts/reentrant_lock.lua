-- reentrant_lock.lua: take a reentrant mutex, or take it once more for its owner; or queue the
-- caller's process.
--
-- KEYS[1] lock   hash: 'o:'..owner -> hold count (one owner at a time), 't' -> fencing token,
--                'a' -> the request id that made the hold;
--                while the mutex is handed to a waiting process, only 'g' -> '~<waiter>:<token>'
--                (lib/queue.lua, pass_on())
-- KEYS[2] fence  last fencing token of the name (lib/fence.lua)
-- KEYS[3] ops    applied re-entries' and voided request ids (lib/ops.lua)
-- KEYS[4] q      waiting processes: waiter id -> arrival (µs) (lib/queue.lua)
-- KEYS[5] qx     waiter id -> entry deadline (ms)
-- ARGV[1] owner      the owner token
-- ARGV[2] id         request id of this attempt
-- ARGV[3] ttl        lease in ms
-- ARGV[4] fence_ttl  ms the fence key outlives the last acquisition
-- ARGV[5] ops_ttl    ms request ids are remembered
-- ARGV[6] expect     '0': take the mutex, or join the hold its owner has (in another process);
--                    a token: re-enter the caller's own hold, which has that token, and only it
-- ARGV[7] waiter     the waiter id of the caller's process; '' never queues (TryLock, re-entry)
-- ARGV[8] flags      one character each, '1' or '0':
--                    [1] more: other goroutines of the process wait; keep it queued
--                    [2] queued: the waiter may be in the queue; a success must take it out
-- ARGV[9] slack      ms a queue entry outlives the lease it waits behind (the waiter re-checks before)
-- ARGV[10] prefix    channel prefix; waiter w listens on prefix..':'..w
-- ARGV[11] pub       'PUBLISH' or 'SPUBLISH'
-- ARGV[12] backup    the waiters watching a grant to the caller's process, comma-separated, told
--                    'c' when it adopts the grant ('' if none)
-- ARGV[13] last      the largest token the caller's process acquired ('0' if none): a grant up
--                    to it was adopted already
-- Reply: {1, count, token}  held: the owner's count after this call and the token of its
--                           outermost acquisition
--        {0, pttl, granted, first}  held by another owner (granted = 0), or handed to another
--                           waiting process (granted = 1), for pttl more ms; first = 1 if the
--                           caller's process heads the queue (the holder's renewals tell it
--                           when the lease now ends: reentrant_renew.lua)
--        {-1}               the request was voided (its sender gave up on it): nothing done
--        {-2}               expect named a hold that is gone (it expired, and the mutex may
--                           be free or held anew, even by the same owner): nothing done
--
-- The count is changed once per request id: an attempt whose reply is lost is voided by its
-- sender (reentrant_abandon.lua) and never counted twice; one sent again finds its count (the
-- id that made a hold is in the hold, a re-entry's in ops), unless its hold has ended, when
-- it takes the mutex anew (distsync sends every request once). A re-entry counts only in the hold
-- it was made for: the caller's view of its count and Redis's never diverge, and a hold that
-- lapsed is never continued under a new one's token, nor a new one under the old token.
--
-- Order: a free mutex is taken by whoever asks (nobody waits, or a grant lapsed); a held one
-- is handed by its last Unlock to the oldest live waiting process (reentrant_unlock.lua),
-- whose head adopts the grant here, as its owner's hold, with the grant's token. A process
-- that takes its turn (a free mutex, or a grant) with more goroutines waiting goes back to the
-- tail; one whose owner joins a hold already there (re-entry, or the owner's hold in another
-- process) keeps its place: joining is not a turn, and never waits behind the queue.
--
-- The fast path (a free mutex, a caller not queued) runs before lib/queue.lua is included, so
-- that it does not pay for making the queue's functions.

-- #include lib/clock.lua
-- #include lib/fence.lua
-- #include lib/ops.lua

local lock, fence, ops, q, qx = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local field, id, ttl = 'o:' .. ARGV[1], ARGV[2], tonumber(ARGV[3])
local waiter = ARGV[7]
local more, queued = string.sub(ARGV[8], 1, 1) == '1', string.sub(ARGV[8], 2, 2) == '1'

local state = op_state(ops, id)
if state == 'void' then
  return {-1}
end

-- take() makes the caller's owner the holder of the free mutex, with token.
-- take() makes the caller's hold. The request id that made it is kept in the hold itself,
-- 'a' -> id, not in ops: it lives exactly as long as the hold it counted in, which is all that
-- reentrant_abandon.lua needs to undo it, and it costs no write of its own.
local function take(token)
  redis.call('HSET', lock, field, 1, 't', int(token), 'a', id)
  redis.call('PEXPIRE', lock, ttl)
  return {1, 1, token}
end

if not state and ARGV[6] == '0' and not (more or queued) and redis.call('EXISTS', lock) == 0 then
  local now_ms, now_us = now()
  local token = next_token(fence, ARGV[4], now_us)
  if not token then
    return no_token(fence)
  end
  return take(token)
end

-- #include lib/queue.lua

local now_ms, now_us = now()
local slack = tonumber(ARGV[9])

-- wait() is the reply for a mutex held by another owner, or handed to another process (g):
-- the caller's process is queued (keeping its place), and told how long the lease or the grant
-- lasts. A lock key without a TTL is not ours to judge: wait as if it were fresh (as
-- mutex_acquire.lua does), rather than re-check at once, again and again.
local function wait(g)
  local pttl = redis.call('PTTL', lock)
  if pttl == -1 then
    pttl = ttl
  elseif pttl < 0 then
    pttl = 0 -- expired since it was read: miniredis's clock moves within a script; look again at once
  end
  if waiter ~= '' then
    enqueue(q, qx, waiter, now_ms, now_us, pttl + slack)
  end
  local granted, first = 0, 0
  if g and string.sub(g, 1, 1) == '~' then
    granted = 1
  elseif waiter ~= '' and redis.call('ZRANGE', q, 0, 0)[1] == waiter then
    first = 1
  end
  return {0, pttl, granted, first}
end

-- served() updates the caller's queue entry after a success: turn says the process took its
-- turn (a free mutex, or a grant) rather than joined a hold already there.
local function served(turn)
  if waiter == '' then
    return
  end
  if more then
    if turn then
      requeue(q, qx, waiter, now_ms, now_us, ttl + slack)
    else
      enqueue(q, qx, waiter, now_ms, now_us, ttl + slack)
    end
  elseif queued and redis.call('ZREM', q, waiter) == 1 then
    redis.call('ZREM', qx, waiter)
  end
end

if state == 'applied' then
  local n = redis.call('HGET', lock, field)
  if n then
    -- A retry of a lock that went through (its queue entry was seen to then). It writes (the
    -- lease from now), as every reply that reports a claim does: a WAIT after it
    -- (distsync.WithReplicaAck) then waits for the lock.
    if redis.call('PEXPIRE', lock, ttl) == 1 then
      return {1, tonumber(n), tonumber(redis.call('HGET', lock, 't'))}
    end -- else the hold expired after the HGET (miniredis only: extend.lua)
  end
  return wait(redis.call('HGET', lock, 'g'))
end

if ARGV[6] ~= '0' then
  if redis.call('HEXISTS', lock, field) == 0 or redis.call('HGET', lock, 't') ~= ARGV[6] then
    return {-2}
  end
end

if redis.call('EXISTS', lock) == 0 then
  local token = next_token(fence, ARGV[4], now_us)
  if not token then
    return no_token(fence)
  end
  served(true)
  return take(token)
end
local mine = redis.call('HMGET', lock, field, 'a') -- the owner's count, and who made the hold
if mine[1] then
  if mine[2] == id and redis.call('PEXPIRE', lock, ttl) == 1 then
    -- This request made the hold (take()): it was sent again after it went through.
    return {1, tonumber(mine[1]), tonumber(redis.call('HGET', lock, 't'))}
  end
  local n = redis.call('HINCRBY', lock, field, 1)
  local t = redis.call('HGET', lock, 't')
  if not t or (redis.call('PTTL', lock) < ttl and redis.call('PEXPIRE', lock, ttl) == 0) then
    -- The hold expired in this script (miniredis only: extend.lua): after the HMGET, and
    -- HINCRBY made a hash of its own, without the token; or after the HINCRBY or the HGET,
    -- and the key is gone. The hold a re-entry asked for is gone ({-2}, as above); another
    -- caller finds the mutex free when it looks again, at once.
    redis.call('DEL', lock)
    if ARGV[6] ~= '0' then
      return {-2}
    end
    return wait(false)
  end
  served(false)
  op_mark(ops, '', id, now_ms, tonumber(ARGV[5]))
  return {1, n, tonumber(t)}
end
local g = redis.call('HGET', lock, 'g')
local token = granted_to(g, waiter) and tonumber(string.sub(g, #waiter + 3))
if token and token > tonumber(ARGV[13]) then
  -- The grant to the caller's process: its owner adopts it, with the grant's token (computed
  -- by the release that made the grant), and the watchers can stop watching.
  redis.call('DEL', lock)
  if ARGV[12] ~= '' then
    tell_each(ARGV[11], ARGV[10], ARGV[12], 'c')
  end
  served(true)
  return take(token)
end
return wait(g)
