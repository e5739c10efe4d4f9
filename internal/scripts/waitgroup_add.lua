-- waitgroup_add.lua: Add delta plain units (delta may be negative: Done), once per request id.
--
-- KEYS and ARGV: see lib/waitgroup.lua (id = the request id; extra unused).
-- Reply: {1, n, r} applied, n the plain units now and r the round now (the open one, or the
--        last that ended; 0 for none), or {1, 0} if an earlier attempt of this request id
--        applied it; {0, n} refused: the plain units, n, would go below 0, and nothing changed
--        (lapsed members may have been dropped); {-1, 0} the request id was voided
--
-- Making pending leave 0 opens a round; bringing it back to 0 ends it (and publishes).

-- #include lib/clock.lua
-- #include lib/ops.lua
-- #include lib/waitgroup.lua

local st = op_state(K.ops, A.id)
if st == 'applied' then
  return {1, 0}
elseif st == 'void' then
  return {-1, 0}
end
local now_ms, now_us = now()
local changed = settle(now_ms)
local n = units()
if n + A.delta < 0 then
  if changed then
    touch(now_ms)
  end
  return {0, n}
end
local before = pending()
redis.call('HSET', K.s, 'n', int(n + A.delta))
if before == 0 and A.delta > 0 then
  open_round(now_us)
elseif before + A.delta == 0 and is_open() then
  end_round()
end
op_mark(K.ops, '', A.id, now_ms, A.ops_ttl)
touch(now_ms)
return {1, n + A.delta, round()}
