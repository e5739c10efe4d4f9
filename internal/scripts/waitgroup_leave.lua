-- waitgroup_leave.lua: a member leaves: done (with or without an error), lost, or undone (its
-- join or claim is taken back as if it never happened). Once per member id.
--
-- KEYS and ARGV: see lib/waitgroup.lua (id = the member id).
-- ARGV[9] extra  'd'..err  done; err (may be '') becomes the round's error if it is the first
--                'l'       lost: the member's holder gave it up unfinished (its Handle closed,
--                          or its lease ended locally before Redis dropped it)
--                'j', 'c'  undo a join (pending goes down by one) or a claim (the unit goes
--                          back to the plain units)
-- Reply: 1 done (or an earlier attempt of this id was); 0 the member is not in the group: its
--        lease lapsed (it was counted as lost) or the keys vanished. Bringing pending to 0 ends
--        the round (and publishes).

-- #include lib/clock.lua
-- #include lib/ops.lua
-- #include lib/waitgroup.lua

local left = A.id .. ':left'
if op_state(K.ops, left) == 'applied' then
  return 1
end
local now_ms = now()
local changed = settle(now_ms) -- a lapsed member is counted as lost here, not as done
if not redis.call('ZSCORE', K.m, A.id) then
  if changed then
    touch(now_ms)
  end
  return 0
end
redis.call('ZREM', K.m, A.id)
local mode = string.sub(A.extra, 1, 1)
if mode == 'd' then
  if #A.extra > 1 then
    redis.call('HSETNX', K.s, 'err', string.sub(A.extra, 2))
  end
elseif mode == 'l' then
  redis.call('HINCRBY', K.s, 'lost', 1)
elseif mode == 'c' then
  redis.call('HSET', K.s, 'n', int(units() + 1))
end
if pending() == 0 and is_open() then
  end_round()
end
op_mark(K.ops, '', left, now_ms, A.ops_ttl)
touch(now_ms)
return 1
