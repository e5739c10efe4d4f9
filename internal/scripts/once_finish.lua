-- once_finish.lua: the leader's result: publish it to every waiting process, keep it briefly
-- for waiters that missed the message, keep it for later callers if asked (unless Forget ran
-- during the lead), and end the lead.
--
-- KEYS[1] lead   KEYS[2] kept   KEYS[4] forgot   (as in once_begin.lua)
-- KEYS[3] res    res:<owner>, this leader's result key
-- KEYS[5] last   optional: the latest leader's result, '<token>\n<result>' (once_begin.lua)
-- ARGV[1] owner    the leader's owner value
-- ARGV[2] result   status byte and payload (see once_begin.lua); '' gives the lead up without
--                  a result: the waiters are told to look again, and one of them leads
-- ARGV[3] keep     ms to keep the result for later callers; '0': do not; '-1': until deleted
-- ARGV[4] linger   ms to keep res:<owner> (and last) for waiters that missed the message
-- ARGV[5] channel  the key's channel
-- ARGV[6] pub      'PUBLISH' or 'SPUBLISH'
-- ARGV[7] token    the lead's fencing token, sent with the result
-- Message: '<token>\n<result>' ('<token>\n' for a lead given up). A waiter takes the result
--          only if token is at least that of the leader it waits for (see once_begin.lua).
-- Reply: the number of subscribers the result reached; -1 if the caller no longer leads (its
--        lease was lost and another may lead): nothing is done then, except for '' (giving an
--        attempt up), which marks res:<owner> '!' so that the attempt, should it still arrive
--        (it may travel on another connection), does not take the lead

if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  if ARGV[2] == '' then
    redis.call('SET', KEYS[3], '!', 'PX', ARGV[4])
  end
  return -1
end
redis.call('DEL', KEYS[1])
-- Forget ran during this lead: the result goes to the callers that waited for it, but it
-- predates the Forget, so it must not be kept for later callers.
local forgotten = redis.call('GET', KEYS[4]) == ARGV[1]
if forgotten then
  redis.call('DEL', KEYS[4])
end
if ARGV[2] == '' then
  return redis.call(ARGV[6], ARGV[5], ARGV[7] .. '\n')
end
redis.call('SET', KEYS[3], ARGV[2], 'PX', ARGV[4])
if KEYS[5] then
  redis.call('SET', KEYS[5], ARGV[7] .. '\n' .. ARGV[2], 'PX', ARGV[4])
end
local keep = tonumber(ARGV[3])
if forgotten then
  keep = 0
end
if keep == -1 then
  redis.call('SET', KEYS[2], ARGV[2])
elseif keep > 0 then
  redis.call('SET', KEYS[2], ARGV[2], 'PX', keep)
end
return redis.call(ARGV[6], ARGV[5], ARGV[7] .. '\n' .. ARGV[2])
