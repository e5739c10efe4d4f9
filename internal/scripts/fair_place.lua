-- fair_place.lua: renew a waiter's place in a fair lock's queue, and be the backstop of a
-- stalled hand-off. Every waiter sends this each third of its waiter lease, batched with the
-- handle's other renewals.
--
-- KEYS[1] lock   KEYS[2] fence   KEYS[3] q   KEYS[4] qx   (as in fair_acquire.lua)
-- ARGV[1] waiter     the waiter id whose place is renewed
-- ARGV[2] wlease     ms the place lives from now; also how long a grant made here lasts
-- ARGV[3] fence_ttl  ms the fence key outlives the last acquisition
-- ARGV[4] prefix     channel prefix (lib/queue.lua)
-- ARGV[5] pub        'PUBLISH' or 'SPUBLISH'
-- With a record of the holder (election, see lib/queue.lua), also:
-- KEYS[5] values     the record's values hash
-- ARGV[6] observers  the observers' channel
-- ARGV[7] ttl        the lease in ms
-- Reply: 1 the place was there and is renewed; 0 it was gone (lapsed, or pruned)
--
-- A free lock with live waiters is a stall: a grant to a waiter that died lapsed, and the
-- waiter that watched it died too (it was the next one in line, dead for less than its lease,
-- so not yet known dead), or a holder's lease ran out. Nothing publishes then. The renewal of
-- any waiter hands the lock to the head here, so that the queue stalls for at most a renewal
-- period after that, not until a waiter's backstop.

-- #include lib/clock.lua
-- #include lib/fence.lua
-- #include lib/queue.lua

local lock, fence, q, qx = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local w, wlease = ARGV[1], tonumber(ARGV[2])
local now_ms = now()
local at = redis.call('ZSCORE', qx, w)
if not at or tonumber(at) <= now_ms then
  return 0
end
redis.call('ZADD', qx, now_ms + wlease, w)
live_for(qx, wlease)
live_for(q, wlease)
local rec = record(5, 6)
if rec then
  live_for(rec.values, wlease)
end
if redis.call('EXISTS', lock) == 0 then
  pass_on(lock, fence, q, qx, ARGV[2], ARGV[3], ARGV[4], ARGV[5], rec)
end
return 1
