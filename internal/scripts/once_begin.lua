-- once_begin.lua: join a call of a once group (or a sync.Once) across processes: take the
-- result if one is kept or was just published, wait for the leader running the call, or lead.
--
-- KEYS[1] lead    the leader's claim: its owner value, PX its lease
-- KEYS[2] kept    a result kept for later callers (WithKeep; a Once's done-marker)
-- KEYS[3] res     the result of the leader the caller waited for (res:<leader>), kept briefly
--                 for waiters that missed its message; the caller passes a key of the same
--                 slot that does not exist when it knows no leader yet, or none whose result
--                 it may take (a forgotten one)
-- KEYS[4] mine    res:<owner>, the caller's own result key: '!' there means the caller gave
--                 this attempt up before it ran (once_finish.lua), so it must not lead
-- KEYS[5] fence   the last fencing token handed out for this key (lib/fence.lua): while a
--                 leader leads, its own token (its lease keeps the key alive)
-- KEYS[6] forgot  the owner value of the leader that led when Forget ran (once_forget.lua)
-- KEYS[7] last    optional: the latest leader's result, '<token>\n<result>', kept briefly
--                 (once_finish.lua)
-- ARGV[1] owner      the caller's owner value, should it lead
-- ARGV[2] ttl        the leader's lease in ms
-- ARGV[3] fence_ttl  ms the fence key outlives the last lead
-- ARGV[4] floor      optional (with KEYS[7]): the smallest token of a result the caller may take
--                    from last: that of the leader it waited for; '-1' for none
-- Reply: {'k', result}         a kept result
--        {'r', result}         the result of the leader the caller waited for, or of a later
--                              one (who took over when its lease lapsed): the caller's message
--                              of it may still be on its way
--        {'w', leader, pttl, token, forgotten}
--                              a leader runs the call; its lease ends in pttl ms unless
--                              renewed. token is its fencing token (-1 if the fence key holds
--                              none): its published result carries it, and a result published
--                              with a smaller token is older. forgotten is 1 if Forget ran
--                              during this lead: the caller must not take its result (neither
--                              its message nor res:<leader>), only wait for its lead to end
--        {'l', token}          the caller leads, with fencing token token: it must run the
--                              call and finish it
--        {'x'}                 the attempt was given up: nothing done
-- A result is one status byte ('v' value, 'e' error, 'p' panic, 'g' runtime.Goexit) and the
-- encoded value or the error's message.
--
-- A fence key holding no token to count on from is an error reply, and nobody leads.

-- #include lib/clock.lua
-- #include lib/fence.lua

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
-- A caller that waited for a leader who died is not to lead again if another caller took over
-- and finished meanwhile: that result is its too, even if its message has not reached it yet.
if KEYS[7] and tonumber(ARGV[4]) and tonumber(ARGV[4]) >= 0 then
  local last = redis.call('GET', KEYS[7])
  if last then
    local nl = string.find(last, '\n', 1, true)
    local tok = nl and tonumber(string.sub(last, 1, nl - 1))
    if tok and tok >= tonumber(ARGV[4]) and nl < #last then
      return {'r', string.sub(last, nl + 1)}
    end
  end
end
local leader = redis.call('GET', KEYS[1])
if leader then
  local pttl = redis.call('PTTL', KEYS[1])
  if pttl == -2 then
    pttl = 0 -- expired since it was read (miniredis's clock moves within a script): look again at once
  elseif pttl < 0 then
    pttl = tonumber(ARGV[2])
  end
  local token = tonumber(redis.call('GET', KEYS[5]))
  if not token or token ~= math.floor(token) or token < 0 or token >= 2^53 - 1 then
    token = -1 -- no token to compare results with: the caller takes none from a message
  end
  local forgotten = 0
  if redis.call('GET', KEYS[6]) == leader then
    forgotten = 1
  end
  return {'w', leader, pttl, token, forgotten}
end
local _, now_us = now()
local token = next_token(KEYS[5], ARGV[3], now_us)
if not token then
  return no_token(KEYS[5])
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
redis.call('DEL', KEYS[6]) -- an earlier leader's mark: nobody reads it once that lead is over
return {'l', token}
