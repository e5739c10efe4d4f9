-- mutex_renew.lua: renew the lease of a lock's holder, and tell the head of the queue. The
-- handle's renewal loop sends it instead of extend.lua for every hold of a mutex, a fair lock
-- and an election.
--
-- KEYS[1] lock   the lock (as in mutex_acquire.lua, fair_acquire.lua)
-- KEYS[2] q      the queue: waiter id -> arrival (µs)
-- KEYS[3] qx     waiter id -> entry deadline (ms)
-- KEYS[4..] keep keys that live as long as the hold (an election's record): made to live ttl
--                more if it is renewed
-- ARGV[1] owner  the holder's owner value
-- ARGV[2] ttl    new lease in ms, counted from now on the server's clock
-- ARGV[3] prefix channel prefix; waiter w listens on prefix..':'..<w up to its '/'>
-- ARGV[4] pub    'PUBLISH' or 'SPUBLISH'
-- Reply: 1 renewed; 0 the lock is gone or belongs to someone else
--
-- 'x <ttl> <waiter>' tells the first waiter whose entry is live (among the first ten) that
-- the lease it waits behind now ends in ttl ms: it re-checks just after that, and not before,
-- unless a message comes. So a head waiter sends nothing while the holder lives, and finds
-- the lock of a holder that died within a round trip of its expiry, instead of up to a third
-- of a lease later (the slack an uninformed waiter must add to stay at one re-check per
-- lease, see core.Backstop).

-- #include lib/clock.lua

if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
for i = 4, #KEYS do
  live_for(KEYS[i], tonumber(ARGV[2]))
end
-- The first waiter whose entry is live: a dead head (its entry lapsed, not yet pruned) must not
-- take the notices of the live one behind it.
local ids = redis.call('ZRANGE', KEYS[2], 0, 9)
if ids[1] then
  local now_ms = now()
  for _, id in ipairs(ids) do
    if tonumber(redis.call('ZSCORE', KEYS[3], id) or '0') > now_ms then
      redis.call(ARGV[4], ARGV[3] .. ':' .. string.match(id, '^[^/]*'), 'x ' .. ARGV[2] .. ' ' .. id)
      break
    end
  end
end
return 1
