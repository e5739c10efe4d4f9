-- election_renew.lua: renew a leader's term, make sure the record names it, and tell the first
-- candidate when the term now ends. A candidate's Campaign sends it once it holds the lock
-- (it took it, or adopted a grant) and before it returns; the renewal loop then sends it for
-- every renewal of the term.
--
-- KEYS[1] lock    KEYS[2] q   KEYS[3] qx   (as in fair_acquire.lua)
-- KEYS[4] values  the record (lib/queue.lua), made to live as long as the term
-- ARGV[1] owner      the term's owner value
-- ARGV[2] ttl        the lease in ms, counted from now on the server's clock
-- ARGV[3] prefix     channel prefix (lib/queue.lua)
-- ARGV[4] pub        'PUBLISH' or 'SPUBLISH'
-- ARGV[5] observers  the observers' channel
-- ARGV[6] waiter     the leader's waiter id
-- ARGV[7] token      the term's fencing token
-- Reply: 1 renewed (and recorded); 0 the lock is gone or belongs to someone else
--
-- The record names a leader only from here (crown()): not from the script that took the lock
-- or adopted a grant, whose reply can come too late for the candidate to use it (Redis or the
-- network stalled for a lease: the candidate gives it back), nor from a grant, whose
-- candidate may be dead. So Leader and Observe name only a candidate whose Campaign holds
-- the term.

-- #include lib/clock.lua
-- #include lib/fence.lua
-- #include lib/queue.lua
-- #include lib/renew.lua

local lock = KEYS[1]
-- PEXPIRE finds no key only on miniredis, which expires keys between a script's commands
-- (extend.lua): the lease is gone, not renewed.
if redis.call('GET', lock) ~= ARGV[1] or redis.call('PEXPIRE', lock, ARGV[2]) == 0 then
  return 0
end
local rec = {values = KEYS[4], channel = ARGV[5], live = tonumber(ARGV[2])}
live_for(rec.values, rec.live)
crown(rec, ARGV[4], lock, ARGV[6], ARGV[7])
tell_head(KEYS[2], KEYS[3], ARGV[3], ARGV[4], ARGV[2])
return 1
