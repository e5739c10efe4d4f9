-- mutex_release.lua: unlock a mutex and hand it to the next waiting process.
--
-- KEYS[1] lock   KEYS[2] fence   KEYS[3] q   KEYS[4] qx   (as in mutex_acquire.lua)
-- ARGV[1] owner      value of the acquisition being released
-- ARGV[2] window     ms a grant lasts unless its new holder confirms it
-- ARGV[3] fence_ttl  ms the fence key outlives the last acquisition
-- ARGV[4] prefix     channel prefix; waiter w listens on prefix..':'..w
-- ARGV[5] pub        'PUBLISH' or 'SPUBLISH'
-- Reply: 1 released; 0 not held by owner (expired, deleted or taken: the lease was lost)
--
-- Without waiters this is three calls: GET, ZRANGE (empty), DEL.

-- #include lib/clock.lua
-- #include lib/fence.lua
-- #include lib/queue.lua

if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
pass_on(KEYS[1], KEYS[2], KEYS[3], KEYS[4], ARGV[2], ARGV[3], ARGV[4], ARGV[5])
return 1
