-- reentrant_unlock.lua: give back holds of a reentrant mutex; the last one frees it.
--
-- KEYS[1] lock   KEYS[2] ops   (as in reentrant_lock.lua)
-- ARGV[1] owner     the owner token
-- ARGV[2] id        request id; a retry sends the same id and is not counted twice
-- ARGV[3] by        holds to give back (1 for Unlock; all of a process's on Close)
-- ARGV[4] ops_ttl   ms request ids are remembered
-- ARGV[5] channel   the name's channel, told when the mutex is freed
-- ARGV[6] pub       'PUBLISH' or 'SPUBLISH'
-- ARGV[7] token     the token of the hold the holds belong to
-- Reply: {1, count}  the owner's count after this call (0: the mutex is free, waiters told)
--        {0}         the owner holds nothing, or a hold with another token (its own expired,
--                    and it or another process sharing the owner locked again): lost

-- #include lib/clock.lua
-- #include lib/ops.lua

local lock, ops = KEYS[1], KEYS[2]
local field, id = 'o:' .. ARGV[1], ARGV[2]
if op_state(ops, id) == 'applied' then
  return {1, tonumber(redis.call('HGET', lock, field) or 0)}
end
local n = tonumber(redis.call('HGET', lock, field))
if not n or redis.call('HGET', lock, 't') ~= ARGV[7] then
  return {0}
end
n = n - tonumber(ARGV[3])
if n <= 0 then
  n = 0
  redis.call('DEL', lock)
  redis.call(ARGV[6], ARGV[5], 'r')
else
  redis.call('HSET', lock, field, n)
end
op_mark(ops, '', id, now(), tonumber(ARGV[4]))
return {1, n}
