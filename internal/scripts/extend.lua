-- extend.lua: renew one lease if its holder still owns it. The handle's renewal loop sends
-- one call per held lease, pipelined per Redis node on each tick.
--
-- KEYS[1] key    the key that carries the claim
-- KEYS[2..] keep  keys that live as long as the claim: made to live ttl more if it is renewed
-- ARGV[1] kind   's': a string whose value is the owner (mutex, rwmutex writer)
--                'h': a hash with a field named owner (reentrant)
--                'z': a sorted set of owner -> expiry in ms, server clock (rwmutex readers)
-- ARGV[2] owner  the holder's owner value
-- ARGV[3] ttl    new lease in ms, counted from now on the server's clock
-- ARGV[4] token  for 'h': the hold's token, in field 't' (a hold that lapsed and was made
--                again under the same owner is another hold); optional otherwise
-- Reply: 1 renewed; 0 the claim is gone (expired or deleted) or belongs to someone else

-- #include lib/clock.lua

local key, kind, owner, ttl = KEYS[1], ARGV[1], ARGV[2], tonumber(ARGV[3])
local function renewed()
  for i = 2, #KEYS do
    live_for(KEYS[i], ttl)
  end
  return 1
end
if kind == 's' then
  -- PEXPIRE finds no key only on miniredis, which expires keys between a script's commands:
  -- then the lease is lost, and told so.
  -- A mutex holder's value may have a '+' after it: waited for (lib/queue.lua).
  local cur = redis.call('GET', key)
  if (cur == owner or cur == owner .. '+') and redis.call('PEXPIRE', key, ttl) == 1 then
    return renewed()
  end
  return 0
elseif kind == 'h' then
  if redis.call('HEXISTS', key, owner) == 1 and (not ARGV[4] or redis.call('HGET', key, 't') == ARGV[4]) then
    if live_for(key, ttl) then
      return renewed()
    end
  end
  return 0
elseif kind == 'z' then
  -- A member whose expiry has passed is a lost share, even if no script has pruned it yet.
  local at = redis.call('ZSCORE', key, owner)
  local now_ms = now()
  -- ZADD adds the member only if the set expired after the ZSCORE (miniredis only, as above):
  -- then every share in it had lapsed, this one too.
  if at and tonumber(at) > now_ms then
    if redis.call('ZADD', key, now_ms + ttl, owner) == 1 then
      redis.call('DEL', key)
      return 0
    end
    live_for(key, ttl)
    return renewed()
  end
  return 0
end
return redis.error_reply('distsync: unknown lease kind ' .. tostring(kind))
