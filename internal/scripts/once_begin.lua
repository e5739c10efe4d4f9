-- once_begin.lua: join a call of a once group (or a sync.Once) across processes: take the
-- result if one is kept or was just published, wait for the leader running the call, or lead.
--
-- KEYS[1] lead   the leader's claim: its owner value, PX its lease
-- KEYS[2] kept   a result kept for later callers (WithKeep; a Once's done-marker)
-- KEYS[3] res    the result of the leader the caller waited for (res:<leader>), kept briefly
--                for waiters that missed its message; the caller passes a key of the same
--                slot that does not exist when it knows no leader yet
-- KEYS[4] mine   res:<owner>, the caller's own result key: '!' there means the caller gave
--                this attempt up before it ran (once_finish.lua), so it must not lead
-- ARGV[1] owner  the caller's owner value, should it lead
-- ARGV[2] ttl    the leader's lease in ms
-- Reply: {'k', result}         a kept result
--        {'r', result}         the result of the leader the caller waited for
--        {'w', leader, pttl}   a leader runs the call; its lease ends in pttl ms unless renewed
--        {'l'}                 the caller leads: it must run the call and finish it
--        {'x'}                 the attempt was given up: nothing done
-- A result is one status byte ('v' value, 'e' error, 'p' panic) and the encoded value or
-- the error's message.

if redis.call('GET', KEYS[4]) == '!' then
  return {'x'}
end
local kept = redis.call('GET', KEYS[2])
if kept then
  return {'k', kept}
end
local res = redis.call('GET', KEYS[3])
if res and res ~= '' and res ~= '!' then
  return {'r', res}
end
local leader = redis.call('GET', KEYS[1])
if leader then
  local pttl = redis.call('PTTL', KEYS[1])
  if pttl < 0 then
    pttl = tonumber(ARGV[2])
  end
  return {'w', leader, pttl}
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return {'l'}
