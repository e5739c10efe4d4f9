-- mutex_release.lua: unlock a mutex and hand it to the next waiting process.
--
-- KEYS[1] lock   KEYS[2] fence   KEYS[3] q   KEYS[4] qx   (as in mutex_acquire.lua)
-- KEYS[5] rel    the owner values of the last releases, for a lease (lib/rel.lua)
-- ARGV[1] owner      value of the acquisition being released
-- ARGV[2] window     ms a grant lasts unless its new holder confirms it
-- ARGV[3] fence_ttl  ms the fence key outlives the last acquisition
-- ARGV[4] prefix     channel prefix; waiter w listens on prefix..':'..w
-- ARGV[5] pub        'PUBLISH' or 'SPUBLISH'
-- ARGV[6] ttl        the lease in ms: how long rel remembers this release
-- With a record of the holder (election, see lib/queue.lua), also:
-- KEYS[6] values     the record's values hash
-- ARGV[7] observers  the observers' channel
-- ARGV[8] ttl        the lease in ms
-- ARGV[9] waiter     the holder's waiter id, whose value is forgotten
-- Reply: 1 released (now, or by an earlier attempt of the same release whose reply was lost);
--        0 not held by owner (expired, deleted or taken: the lease was lost)
--
-- A release is retried after a connection error. Finding the lock not its own, the retry
-- cannot tell an attempt that went through from a lock that was lost in between (Redis
-- restarted empty, say) but for rel, where the release that went through recorded its owner
-- value: a loss is never reported as a release, and a release is reported as a loss only if
-- more than a handful of other releases of the name came in between (lib/rel.lua).
--
-- A holder's value has a '+' after it once a waiter queued behind it (mark_waited,
-- lib/queue.lua): then the lock is handed on. Without it, nobody waits, or those that do will
-- look again before their turn could come (they queued before this hold began, when the lock
-- was free: a lease or a grant lapsed), and the release is four calls: GET, DEL, LPUSH, PEXPIRE
-- (and an LTRIM one release in sixteen: lib/rel.lua). A grant ('~...') is never marked: its
-- release looks at the queue.

-- #include lib/rel.lua

local cur = redis.call('GET', KEYS[1])
if cur ~= ARGV[1] and cur ~= ARGV[1] .. '+' then
  if released(KEYS[5], ARGV[1]) then
    return 1
  end
  return 0
end
-- Nobody waits: free the lock without making the queue's functions (a Lua closure each).
if not KEYS[6] and cur == ARGV[1] and (string.sub(cur, 1, 1) ~= '~' or redis.call('EXISTS', KEYS[3]) == 0) then
  if redis.call('DEL', KEYS[1]) == 0 then
    return 0 -- the lease expired after the GET (miniredis only: extend.lua): it was lost
  end
  record_release(KEYS[5], ARGV[1], ARGV[6])
  return 1
end

-- #include lib/clock.lua
-- #include lib/fence.lua
-- #include lib/queue.lua

local rec = record(6, 7)
forget(rec, ARGV[9])
local _, had = pass_on(KEYS[1], KEYS[2], KEYS[3], KEYS[4], ARGV[2], ARGV[3], ARGV[4], ARGV[5], rec)
if not had then
  return 0 -- expired after the GET (miniredis only: extend.lua): passed on all the same, and lost
end
record_release(KEYS[5], ARGV[1], ARGV[6])
return 1
