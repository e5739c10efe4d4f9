-- election_leader.lua: read who leads an election (a fair lock with a record, lib/queue.lua).
--
-- KEYS[1] lock    the leader's owner value: its waiter id, or '~<waiter>:<token>' for a grant
-- KEYS[2] fence   the last fencing token: the fallback for the term of a leader that took
--                 the lock itself (the record keeps it under '@t')
-- KEYS[3] values  the record's values hash (waiter id -> value; '@' leader, '@t' its term;
--                 '#' announcements)
-- Reply: {0}                                         nobody leads
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
local waiter, term = string.match(cur, '^~(.*):(%d+)$')
if not waiter then
  -- The token of a holder that took the lock itself, or adopted a grant, is in the record
  -- (the fence key may have expired while it held); the fence is the fallback.
  waiter = cur
  if redis.call('HGET', KEYS[3], '@') == waiter then
    term = redis.call('HGET', KEYS[3], '@t')
  end
  term = term or redis.call('GET', KEYS[2])
end
local seq = redis.call('HGET', KEYS[3], '#') or '0'
local value = redis.call('HGET', KEYS[3], waiter) or ''
return {1, tonumber(term or '0'), tonumber(seq), redis.call('PTTL', KEYS[1]), waiter, value}
