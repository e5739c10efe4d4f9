-- election_leader.lua: read who leads an election (a fair lock with a record, lib/queue.lua).
--
-- KEYS[1] lock    the leader's owner value: its waiter id, or '~<waiter>:<token>' for a grant
-- KEYS[2] fence   the last fencing token: the fallback for the term of a leader that took
--                 the lock itself (the record keeps it under '@t')
-- KEYS[3] values  the record's values hash (waiter id -> value; '@' leader, '@t' its term;
--                 '#' announcements)
-- Reply: {0}                                         nobody leads (or the lock was handed
--                                                    to a candidate that has not confirmed
--                                                    it yet: it may be dead, and is not named)
--        {1, term, seq, pttl, waiter, value}         the leader: its term (fencing token), the
--                                                    number of announcements so far, its
--                                                    remaining lease in ms, its waiter id and
--                                                    value
--
-- It changes nothing.

local cur = redis.call('GET', KEYS[1])
if not cur then
  return {0}
end
-- The holder is the leader once the record names it (lib/queue.lua: crown()); the record
-- keeps its term (the fence key may have expired while it held).
local waiter = string.match(cur, '^~(.*):%d+$') or cur
if redis.call('HGET', KEYS[3], '@') ~= waiter then
  return {0}
end
local term = redis.call('HGET', KEYS[3], '@t') or redis.call('GET', KEYS[2])
local seq = redis.call('HGET', KEYS[3], '#') or '0'
local value = redis.call('HGET', KEYS[3], waiter) or ''
return {1, tonumber(term or '0'), tonumber(seq), redis.call('PTTL', KEYS[1]), waiter, value}
