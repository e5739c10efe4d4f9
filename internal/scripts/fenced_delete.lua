-- fenced_delete.lua: delete a fenced value if the writer's token is at least the largest token
-- recorded for it, and keep the token, so that a stale writer still cannot write the value.
--
-- KEYS[1] value   the hash, as in fenced_set.lua
-- ARGV[1] token   the writer's fencing token, as in fenced_set.lua
-- ARGV[2] keep    ms the token lives on without a value (the fence retention); a key that
--                 already has a longer TTL keeps it
-- Reply: 1 accepted: the value is gone (whether or not it was set) and the token recorded;
--        0 refused: a larger token is recorded; nothing changed;
--        an error if field 'token' holds anything but a token (see fenced_set.lua); nothing
--          changed
--
-- The token check is fenced_set.lua's (lib/fenced.lua).

-- #include lib/fenced.lua

local no = refused(KEYS[1], ARGV[1])
if no then
  return no
end
redis.call('HDEL', KEYS[1], 'value')
redis.call('HSET', KEYS[1], 'token', ARGV[1])
if redis.call('PTTL', KEYS[1]) < tonumber(ARGV[2]) then -- -1, no TTL (a value's), included
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 1
