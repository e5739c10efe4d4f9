-- reentrant_abandon.lua: undo a lock attempt whose sender gave up on it (its context ended,
-- or its reply was lost), whether or not it reached Redis yet.
--
-- KEYS[1] lock   KEYS[2] ops   (as in reentrant_lock.lua)
-- ARGV[1] owner     the owner token of the attempt
-- ARGV[2] id        the attempt's request id
-- ARGV[3] ops_ttl   ms request ids are remembered
-- ARGV[4] channel   the name's channel, told if the mutex is freed
-- ARGV[5] pub       'PUBLISH' or 'SPUBLISH'
-- Reply: 1 the attempt had been counted and was undone (or its hold is gone); 0 it had not
--        run (it never will), or it was counted in an earlier hold than the current one
--
-- Cancelling a context does not cancel a command Redis already received, and the attempt and
-- this script may travel on different connections: either may run first. Voiding the id
-- covers both orders.

-- #include lib/clock.lua
-- #include lib/ops.lua

local lock, ops = KEYS[1], KEYS[2]
local field, id = 'o:' .. ARGV[1], ARGV[2]
if redis.call('ZSCORE', ops, '!' .. id) then
  return 0
end
local applied = redis.call('ZSCORE', ops, id) -- ms when the attempt was counted, or false
op_mark(ops, '!', id, now(), tonumber(ARGV[3]))
if not applied then
  return 0
end
local n = tonumber(redis.call('HGET', lock, field))
if not n then
  return 1 -- counted, but the hold is gone already
end
-- The attempt was counted in the hold that exists now only if that hold was created no later
-- than the attempt: its token follows the server clock in µs (lib/fence.lua). A hold created
-- after it (the counted one expired, and the owner locked again) is not this attempt's to undo.
-- A token ahead of the clock (the clock stepped back) makes this refuse an undo it could have
-- made: the count then stays one too high until the hold's lease runs out, never too low.
if tonumber(redis.call('HGET', lock, 't') or 0) >= (tonumber(applied) + 1) * 1000 then
  return 0
end
if n <= 1 then
  redis.call('DEL', lock)
  redis.call(ARGV[5], ARGV[4], 'r')
else
  redis.call('HSET', lock, field, n - 1)
end
return 1
