-- lib/fenced.lua: the token check of a fenced value (fenced_set.lua, fenced_delete.lua).
--
-- Tokens are compared as decimal strings, by length and then digit by digit: Lua numbers are
-- doubles, which round int64 values above 2^53, and Lua's string '<' follows the server's
-- locale.

-- less(a, b): token a is below token b (both canonical decimals).
local function less(a, b)
  if #a ~= #b then
    return #a < #b
  end
  for i = 1, #a do
    local x, y = string.byte(a, i), string.byte(b, i)
    if x ~= y then
      return x < y
    end
  end
  return false
end

-- refused() returns nil if a writer with token may write the fenced value in key (no token
-- recorded, or one at most token); else the reply to give: 0 if a larger token is recorded,
-- an error if the recorded one is no token (someone else wrote it).
local function refused(key, token)
  local last = redis.call('HGET', key, 'token')
  if not last then
    return nil
  end
  if not string.find(last, '^[1-9][0-9]*$') or less('9223372036854775807', last) then
    return redis.error_reply('distsync: the fenced value ' .. key .. ' holds no fencing token')
  end
  if less(token, last) then
    return 0
  end
  return nil
end
