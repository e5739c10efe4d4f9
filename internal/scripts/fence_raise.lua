-- fence_raise.lua: raise a name's fencing counter to at least a token handed out elsewhere,
-- so that every token this primary hands out later is larger. A mutex held on a quorum of
-- independent primaries (mutex.WithQuorum) takes the largest of its primaries' tokens as its
-- own and raises each of those primaries to it before Lock returns: the next holder's quorum
-- shares a primary with this one, whose next token is then larger.
--
-- KEYS[1] fence   ARGV[1] token (an integer)   ARGV[2] fence retention ms
-- Reply: 1 (the counter is at least token now); an error, writing nothing, if the fence key
--        holds something that is not a token

-- #include lib/clock.lua
-- #include lib/fence.lua

local cur = redis.pcall('GET', KEYS[1])
if type(cur) == 'table' then
  return no_token(KEYS[1]) -- another type (WRONGTYPE)
end
local n = cur and tonumber(cur)
if cur and (not n or n ~= math.floor(n) or n >= 2^53 - 1) then
  return no_token(KEYS[1])
end
if not n or n < tonumber(ARGV[1]) then
  -- A mark for a void mark (a '0' before the token, lib/fence.lua) is kept.
  local mark = cur and string.sub(cur, 1, 1) == '0' and '0' or ''
  redis.call('SET', KEYS[1], mark .. ARGV[1], 'PX', ARGV[2])
end
return 1
