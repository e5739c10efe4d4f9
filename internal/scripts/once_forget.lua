-- once_forget.lua: Forget a key of a once group (a sync.Once's Reset): delete the result kept
-- for it and, if a leader runs the call, mark that leader forgotten, so that its result is not
-- kept when it finishes (once_finish.lua) and is not taken by callers that come after the
-- Forget (once_begin.lua), and tell the waiting processes.
--
-- KEYS[1] lead   KEYS[2] kept   KEYS[3] forgot   (as in once_begin.lua)
-- ARGV[1] linger   ms the mark outlives the lead's lease as it stands (the leader's renewals
--                  keep it alive as long as the lead)
-- ARGV[2] channel  the key's channel
-- ARGV[3] pub      'PUBLISH' or 'SPUBLISH'
-- Message: 'f', when a leader was marked: a process whose call waits for it stops letting new
--          callers join that call.
-- Reply: 1 if a leader was marked, 0 if none leads.

redis.call('DEL', KEYS[2])
local leader = redis.call('GET', KEYS[1])
if not leader then
  redis.call('DEL', KEYS[3]) -- an earlier leader's mark: its lead is over
  return 0
end
local pttl = redis.call('PTTL', KEYS[1])
if pttl < 0 then
  pttl = 0 -- a lead without a TTL is not ours: the mark still gets one
end
redis.call('SET', KEYS[3], leader, 'PX', pttl + tonumber(ARGV[1]))
redis.call(ARGV[3], ARGV[2], 'f')
return 1
