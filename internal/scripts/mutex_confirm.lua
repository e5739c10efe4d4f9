-- mutex_confirm.lua: confirm a grant. A waiter the lock was granted to (see lib/queue.lua)
-- returns from Lock at once and sends this right after, through the handle's renewal loop:
-- it extends the grant to the holder's lease and tells the watchers to stop watching.
--
-- KEYS[1] lock   KEYS[2] fence   KEYS[3] q   KEYS[4] qx   (as in mutex_acquire.lua)
-- ARGV[1] owner      the grant's owner value, '~<waiter>:<token>'
-- ARGV[2] ttl        lease in ms
-- ARGV[3] waiter     the holder's waiter id
-- ARGV[4] requeue    '1': more goroutines of the holder's process wait; queue it again, at the tail
-- ARGV[5] slack      ms a queue entry outlives the lease it waits behind
-- ARGV[6] prefix     channel prefix; waiter w listens on prefix..':'..w
-- ARGV[7] pub        'PUBLISH' or 'SPUBLISH'
-- ARGV[8] backup     the waiters watching the grant, comma-separated ('' if none)
-- ARGV[9] window     ms a grant lasts unless confirmed
-- ARGV[10] fence_ttl ms the fence key outlives the last acquisition
-- KEYS[5] values     optional: a record of the holder (election, lib/queue.lua), made to live
--                    as long as the confirmed lease
-- Reply: 1 confirmed; 0 the grant is gone (it expired, or was released already)

-- #include lib/clock.lua
-- #include lib/fence.lua
-- #include lib/queue.lua

local lock, fence, q, qx = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local cur = redis.call('GET', lock)
if ARGV[4] == '1' then
  -- Whether or not the grant is still held, the other goroutines still wait. The holder may
  -- have released already (its release and this confirm travel on different connections):
  -- then nobody will hand the free lock on, so hand it on here.
  local now_ms, now_us = now()
  requeue(q, qx, ARGV[3], now_ms, now_us, tonumber(ARGV[2]) + tonumber(ARGV[5]))
  if not cur then
    pass_on(lock, fence, q, qx, ARGV[9], ARGV[10], ARGV[6], ARGV[7])
    return 0
  end
end
if cur ~= ARGV[1] then
  return 0
end
if redis.call('PEXPIRE', lock, ARGV[2]) == 0 then
  -- The grant expired after the GET (miniredis only: extend.lua): it is lost, and the free lock
  -- is handed on, as above.
  pass_on(lock, fence, q, qx, ARGV[9], ARGV[10], ARGV[6], ARGV[7])
  return 0
end
if KEYS[5] then
  live_for(KEYS[5], tonumber(ARGV[2]))
end
if ARGV[8] ~= '' then
  tell_each(ARGV[7], ARGV[6], ARGV[8], 'c')
end
return 1
