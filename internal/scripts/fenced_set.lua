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
-- The token check (lib/fenced.lua) compares decimal strings, not Lua numbers.

-- #include lib/fenced.lua

local no = refused(KEYS[1], ARGV[1])
if no then
  return no
end
redis.call('HSET', KEYS[1], 'value', ARGV[2], 'token', ARGV[1])
redis.call('PERSIST', KEYS[1])
return 1
