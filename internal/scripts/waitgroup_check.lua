-- waitgroup_check.lua: what a waiter needs: has the round it waits for ended, and if not, how
-- long until it should look again. It writes nothing of the caller's: it only drops lapsed
-- members, as every waitgroup script does first (which may end the round, and publish).
--
-- KEYS and ARGV: see lib/waitgroup.lua (id, delta, ttl unused).
-- ARGV[9] extra  the round the caller waits for; '' on its first check (the current round, or
--                the last that ended); '+<mine>' on a first check by a process that took part
--                in round <mine> (added to it, or joined it) and has not seen it end: if the
--                keys were made afresh since (their first round is later, or there are none),
--                that round vanished with its outcome, and the reply is {'x', first}
-- Reply, every element a string:
--   {'d', round, outcome}  the round ended with outcome '<lost>\n<err>'; round and outcome
--                          are '' on a first check of a group with no round kept (never used,
--                          or its keys expired): pending is 0
--   {'w', round, ms}       the round is open; ms until the earliest member's lease lapses (a
--                          lapse publishes nothing), or, without members, until the group's
--                          keys expire: the waiter's backstop
--   {'x', first}           the round is no longer known: the keys vanished (expired or deleted)
--                          since, or more than `keep` rounds ended since. first: the first
--                          round the keys now hold ('' if they hold none)

-- #include lib/clock.lua
-- #include lib/ops.lua
-- #include lib/waitgroup.lua

local now_ms = now()
if settle(now_ms) then
  touch(now_ms)
end
local h = redis.call('HMGET', K.s, 'r', 'open', 'first')
local r, open, first = h[1], h[2] == '1', h[3] or ''
local w, mine = A.extra, nil
if string.sub(w, 1, 1) == '+' then
  w, mine = '', tonumber(string.sub(w, 2))
end
if not r then
  if w == '' and not mine then
    return {'d', '', ''}
  end
  return {'x', ''}
end
if mine and tonumber(first) and mine < tonumber(first) then
  return {'x', first} -- the caller's round is older than every round these keys held
end
if w == '' then
  w = r
end
local o = redis.call('HGET', K.s, 'o:' .. w)
if o then
  return {'d', w, o}
end
if w == r and open then
  local e = redis.call('ZRANGE', K.m, 0, 0, 'WITHSCORES')
  local ms
  if e[1] then
    ms = math.max((tonumber(e[2]) or 0) - now_ms, 0)
  else
    ms = redis.call('PTTL', K.s)
    if ms < 0 then
      ms = A.expiry
    end
  end
  return {'w', r, int(ms)}
end
if A.extra == '' then
  return {'d', '', ''} -- no outcome kept for the last round: nothing to report
end
return {'x', first}
