-- mutex_confirm.lua: confirm a grant. A waiter the lock was granted to (see lib/queue.lua)
-- returns from Lock at once and sends this right after, through the handle's renewal loop:
-- it extends the grant to the holder's lease and tells the backup to stop watching.
--
-- KEYS[1] lock   KEYS[2] q   KEYS[3] qx   (as in mutex_acquire.lua)
-- ARGV[1] owner    the grant's owner value, '~<waiter>:<token>'
-- ARGV[2] ttl      lease in ms
-- ARGV[3] waiter   the holder's waiter id
-- ARGV[4] requeue  '1': more goroutines of the holder's process wait; queue it again, at the tail
-- ARGV[5] slack    ms a queue entry outlives the lease it waits behind
-- ARGV[6] prefix   channel prefix; waiter w listens on prefix..':'..w
-- ARGV[7] pub      'PUBLISH' or 'SPUBLISH'
-- ARGV[8] backup   waiter watching the grant ('' if none)
-- Reply: 1 confirmed; 0 the grant is gone (it expired, or was released already)

-- #include lib/clock.lua
-- #include lib/fence.lua
-- #include lib/queue.lua

if ARGV[4] == '1' then
  -- Whether or not the grant is still held: the other goroutines still wait.
  local now_ms, now_us = now()
  requeue(KEYS[2], KEYS[3], ARGV[3], now_ms, now_us, tonumber(ARGV[2]) + tonumber(ARGV[5]))
end
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
if ARGV[8] ~= '' then
  redis.call(ARGV[7], ARGV[6] .. ':' .. ARGV[8], 'c')
end
return 1
