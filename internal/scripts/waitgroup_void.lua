-- waitgroup_void.lua: settle a request whose reply was lost and that its caller gives up on
-- (its context ended): report whether it was applied, and if not, make sure it never is.
--
-- KEYS and ARGV: see lib/waitgroup.lua (id = the request or member id of waitgroup_add.lua or
-- waitgroup_join.lua).
-- Reply: 1 it was applied (the caller reports success); 0 it was not, and is voided: if it
--        reaches Redis later, it does nothing

-- #include lib/clock.lua
-- #include lib/ops.lua
-- #include lib/waitgroup.lua

local st = op_state(K.ops, A.id)
if st == 'applied' or redis.call('ZSCORE', K.m, A.id) then
  return 1
elseif st == 'void' then
  return 0
end
op_mark(K.ops, '!', A.id, now(), A.ops_ttl)
return 0
