-- waitgroup_join.lua: make a member, under a lease: a new unit (join), or one plain unit that
-- Add added, taken over (claim: pending is unchanged). Once per member id.
--
-- KEYS and ARGV: see lib/waitgroup.lua (id = the member id; extra 'j' join, 'c' claim).
-- Reply: {1, r} the member is in, expiring ttl ms from now, in round r; {1} an earlier attempt
--        of this id put it in; {0} claim: no plain unit is left to claim, and nothing changed;
--        {-1} the id was voided

-- #include lib/clock.lua
-- #include lib/ops.lua
-- #include lib/waitgroup.lua

local st = op_state(K.ops, A.id)
if st == 'applied' then
  return {1} -- a retry: if the member lapsed meanwhile, its first renewal reports the loss
elseif st == 'void' then
  return {-1}
end
local now_ms, now_us = now()
local changed = settle(now_ms)
if A.extra == 'c' then
  local n = units()
  if n < 1 then
    if changed then
      touch(now_ms)
    end
    return {0}
  end
  redis.call('HSET', K.s, 'n', int(n - 1))
elseif pending() == 0 then
  open_round(now_us)
end
redis.call('ZADD', K.m, now_ms + A.ttl, A.id)
op_mark(K.ops, '', A.id, now_ms, A.ops_ttl)
touch(now_ms)
return {1, round()}
