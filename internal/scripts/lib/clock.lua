-- lib/clock.lua: the server's clock. Every deadline in distsync is computed here, from TIME,
-- never from a client's clock.

-- now() returns the server time in whole milliseconds and in microseconds.
local function now()
  local t = redis.call('TIME')
  local s, us = tonumber(t[1]), tonumber(t[2])
  return s * 1000 + math.floor(us / 1000), s * 1000000 + us
end

-- int() formats a number as an integer string. Lua 5.1 prints large numbers in exponent form
-- (1.7e+15), which would lose digits when written back to Redis.
local function int(n)
  return string.format('%.0f', n)
end

-- live_for() makes key live at least ms more milliseconds, never shortening its life: a
-- key that holds entries goes away after the last of them could have lapsed. It returns
-- whether the key exists: Redis expires no key while a script runs, but miniredis does, by
-- each command's time, so a key read a moment ago may be gone here.
local function live_for(key, ms)
  local ttl = redis.call('PTTL', key)
  if ttl == -2 then
    return false
  end
  if ttl < ms then -- -1 (no TTL yet) included
    return redis.call('PEXPIRE', key, ms) == 1
  end
  return true
end
