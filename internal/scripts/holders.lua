-- holders.lua: who holds a name, for inspection. It writes nothing.
--
-- KEYS: the claim's keys, in the order its layout gives them below
-- ARGV[1] layout: how the primitive keeps its claims
--   'string'  mutex, fair: KEYS[1] the lock, a string holding the owner value (a grant not yet
--             confirmed is '~<waiter>:<token>'), KEYS[2] the fence (the holder's token: every
--             acquisition takes the next one, so the last one is the holder's)
--   'hash'    reentrant: KEYS[1] the lock, a hash 'o:'..owner -> hold count, 't' -> token (a
--             grant not yet taken up is 'g' -> '~<waiter>:<token>', a row of count 0)
--   'rw'      rwmutex: KEYS[1] the writer's claim (as 'string'), KEYS[2] the readers (zset
--             owner -> lease expiry in ms), KEYS[3] the fence (readers carry the last writer's
--             token, which is the fence's while they hold: no writer gets in meanwhile)
--   'sem'     semaphore: KEYS[1] holders (zset owner -> lease expiry in ms), KEYS[2] holders
--             (hash owner -> permits held)
-- Reply: one {owner, remaining_ms, token, count, shared} per live hold (shared is 1 for a
-- read hold); none if the name is free. remaining_ms is what Redis keeps the hold for unless
-- it is renewed. O(holders). The rows are made by lib/holders.lua, which inspect.lua shares.

-- #include lib/clock.lua
-- #include lib/holders.lua

local layout = ARGV[1]
local out = {}

if layout == 'string' then
  exclusive_holder(out, KEYS[1], KEYS[2])
elseif layout == 'hash' then
  hash_holders(out, KEYS[1])
elseif layout == 'rw' then
  exclusive_holder(out, KEYS[1], KEYS[3])
  zset_holders(out, KEYS[2], now(), fence_token(redis.call('GET', KEYS[3])), nil)
elseif layout == 'sem' then
  zset_holders(out, KEYS[1], now(), 0, KEYS[2])
else
  return redis.error_reply('holders.lua: unknown layout ' .. tostring(layout))
end
return out
