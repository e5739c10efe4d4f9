-- fenced_set.lua: write a fenced value if the writer's token is at least the largest token
-- recorded for it.
--
-- KEYS[1] value   a hash: field 'value' the value (absent when never set, or deleted), field
--                 'token' the largest token accepted (absent when none was)
-- ARGV[1] token   the writer's fencing token: a positive int64 in decimal, no leading zeros
-- ARGV[2] value   the value to store (any bytes)
-- Reply: 1 accepted: value and token written, and the key made to live without a TTL (a
--          delete gave it one);
--        0 refused: a larger token is recorded; nothing changed;
--        an error if field 'token' holds anything but a token (as ARGV[1] is one, at most
--          2^63 - 1: someone else wrote it); nothing changed
--
-- Tokens are compared as decimal strings, by length and then digit by digit: Lua numbers are
-- doubles, which round int64 values above 2^53, and Lua's string '<' follows the server's
-- locale. fenced_delete.lua makes the same check.

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

local last = redis.call('HGET', KEYS[1], 'token')
if last then
  if not string.find(last, '^[1-9][0-9]*$') or less('9223372036854775807', last) then
    return redis.error_reply('distsync: the fenced value ' .. KEYS[1] .. ' holds no fencing token')
  end
  if less(ARGV[1], last) then
    return 0
  end
end
redis.call('HSET', KEYS[1], 'value', ARGV[2], 'token', ARGV[1])
redis.call('PERSIST', KEYS[1])
return 1
