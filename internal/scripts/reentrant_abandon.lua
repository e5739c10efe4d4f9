-- reentrant_abandon.lua: undo a lock attempt whose sender gave up on it (its context ended,
-- or its reply was lost), whether or not it reached Redis yet.
--
-- KEYS[1] lock   KEYS[2] ops   (as in reentrant_lock.lua)
-- ARGV[1] owner     the owner token of the attempt
-- ARGV[2] id        the attempt's request id
-- ARGV[3] ops_ttl   ms request ids are remembered
-- ARGV[4] channel   the name's channel, told if the mutex is freed
-- ARGV[5] pub       'PUBLISH' or 'SPUBLISH'
-- Reply: 1 the attempt had been counted and was undone; 0 it had not run (it never will)
--
-- Cancelling a context does not cancel a command Redis already received, and the attempt and
-- this script may travel on different connections: either may run first. Voiding the id
-- covers both orders.

-- #include lib/clock.lua
-- #include lib/ops.lua

local lock, ops = KEYS[1], KEYS[2]
local field, id = 'o:' .. ARGV[1], ARGV[2]
local state = op_state(ops, id)
if state == 'void' then
  return 0
end
op_mark(ops, '!', id, now(), tonumber(ARGV[3]))
if state ~= 'applied' then
  return 0
end
local n = tonumber(redis.call('HGET', lock, field))
if not n then
  return 1 -- counted, but the hold is gone already
end
if n <= 1 then
  redis.call('DEL', lock)
  redis.call(ARGV[5], ARGV[4], 'r')
else
  redis.call('HSET', lock, field, n - 1)
end
return 1
