-- reentrant_lock.lua: take a reentrant mutex, or take it once more for its owner.
--
-- KEYS[1] lock   hash: 'o:'..owner -> hold count (one owner at a time), 't' -> fencing token
-- KEYS[2] fence  last fencing token of the name (lib/fence.lua)
-- KEYS[3] ops    applied and voided request ids (lib/ops.lua)
-- ARGV[1] owner      the owner token
-- ARGV[2] id         request id of this attempt
-- ARGV[3] ttl        lease in ms
-- ARGV[4] fence_ttl  ms the fence key outlives the last acquisition
-- ARGV[5] ops_ttl    ms request ids are remembered
-- ARGV[6] expect     '0': take the mutex, or join the hold its owner has (in another process);
--                    a token: re-enter the caller's own hold, which has that token, and only it
-- Reply: {1, count, token}  held: the owner's count after this call and the token of its
--                           outermost acquisition
--        {0, pttl}          held by another owner, for pttl more ms
--        {-1}               the request was voided (its sender gave up on it): nothing done
--        {-2}               expect named a hold that is gone (it expired, and the mutex may
--                           be free or held anew, even by the same owner): nothing done
--
-- The count is changed once per request id: an attempt whose reply is lost is voided by its
-- sender (reentrant_abandon.lua) and never counted twice. A re-entry counts only in the hold
-- it was made for: the caller's view of its count and Redis's never diverge, and a hold that
-- lapsed is never continued under a new one's token, nor a new one under the old token.

-- #include lib/clock.lua
-- #include lib/fence.lua
-- #include lib/ops.lua

local lock, fence, ops = KEYS[1], KEYS[2], KEYS[3]
local field, id, ttl = 'o:' .. ARGV[1], ARGV[2], tonumber(ARGV[3])

-- held() is the reply for a mutex held by another owner: its lease's PTTL. A lock key without
-- a TTL is not ours to judge: wait as if it were fresh (as mutex_acquire.lua does), rather
-- than re-check at once, again and again.
local function held()
  local pttl = redis.call('PTTL', lock)
  if pttl == -1 then
    pttl = ttl
  end
  return {0, math.max(pttl, 0)}
end

local state = op_state(ops, id)
if state == 'void' then
  return {-1}
elseif state == 'applied' then
  local n = redis.call('HGET', lock, field)
  if n then
    -- A retry of a lock that went through. It writes (the lease from now), as every reply that
    -- reports a claim does: a WAIT after it (distsync.WithReplicaAck) then waits for the lock.
    redis.call('PEXPIRE', lock, ttl)
    return {1, tonumber(n), tonumber(redis.call('HGET', lock, 't'))}
  end
  return held()
end

if ARGV[6] ~= '0' then
  if redis.call('HEXISTS', lock, field) == 0 or redis.call('HGET', lock, 't') ~= ARGV[6] then
    return {-2}
  end
end

local now_ms, now_us = now()
local n, token
if redis.call('EXISTS', lock) == 0 then
  token = next_token(fence, ARGV[4], now_us)
  if not token then
    return no_token(fence)
  end
  redis.call('HSET', lock, field, 1, 't', int(token))
  redis.call('PEXPIRE', lock, ttl)
  n = 1
elseif redis.call('HEXISTS', lock, field) == 1 then
  n = redis.call('HINCRBY', lock, field, 1)
  token = tonumber(redis.call('HGET', lock, 't'))
  if redis.call('PTTL', lock) < ttl then
    redis.call('PEXPIRE', lock, ttl)
  end
else
  return held()
end
op_mark(ops, '', id, now_ms, tonumber(ARGV[5]))
return {1, n, token}
