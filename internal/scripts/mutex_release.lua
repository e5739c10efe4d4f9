-- mutex_release.lua: unlock a mutex and hand it to the next waiting process.
--
-- KEYS[1] lock   KEYS[2] q   KEYS[3] qx   (as in mutex_acquire.lua)
-- ARGV[1] owner    value of the acquisition being released
-- ARGV[2] window   ms the next waiter has to claim its reservation
-- ARGV[3] prefix   channel prefix; waiter w listens on prefix..':'..w
-- ARGV[4] pub      'PUBLISH' or 'SPUBLISH'
-- Reply: 1 released; 0 not held by owner (expired, deleted or taken: the lease was lost)
--
-- Without waiters this is three calls: GET, ZRANGE (empty), DEL.

-- #include lib/clock.lua
-- #include lib/queue.lua

if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
pass_on(KEYS[1], KEYS[2], KEYS[3], ARGV[2], ARGV[3], ARGV[4])
return 1
