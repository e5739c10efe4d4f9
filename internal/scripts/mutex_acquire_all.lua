-- mutex_acquire_all.lua: take several free mutexes whose keys share one slot: all, or none.
--
-- KEYS: four per mutex, in the order they are taken: lock, fence, qx (as in mutex_acquire.lua)
--       and with, the record of the set the mutex is held in (read by inspect)
-- ARGV[1] owner      value that identifies this acquisition (unique per attempt; the same for
--                    every mutex of the call)
-- ARGV[2] fence_ttl  ms the fence keys outlive the last acquisition
-- ARGV[3] with       the set, as the record says it after the owner value and a newline
-- ARGV[4..] ttl      each mutex's lease in ms, in the order of KEYS
-- Reply: {1, token, ...}  all taken, with a fencing token per mutex in the order of KEYS
--        {0, i}           none taken: mutex i (counting from 1) is held, or granted to a
--                         waiter; i = 0 if the attempt was voided (mutex_leave.lua)
--
-- It never waits and never queues: the caller waits for the first busy mutex through that
-- mutex's own queue (mutex_acquire.lua). Like mutex_acquire.lua's fast path it takes a free
-- mutex even while waiters are queued for it: a grant to one of them holds the lock key, so a
-- mutex whose waiter was just served is not free. The record with is written with the lock's
-- lease and renewed with it (mutex_renew.lua's keep keys); it names its holder's owner value,
-- so a record left by an earlier hold is known by that.
--
-- A caller that gives up while this is in flight voids its owner value in every mutex's qx
-- (mutex_leave.lua, in the order of KEYS), or passes on what this took if it ran first: a
-- void of the first mutex is seen here before anything is taken.

-- #include lib/clock.lua
-- #include lib/fence.lua

local owner, fence_ttl = ARGV[1], ARGV[2]
local n = #KEYS / 4

for i = 1, n do
  if redis.call('ZSCORE', KEYS[4 * i - 1], '!' .. owner) then
    return {0, 0}
  end
  if redis.call('EXISTS', KEYS[4 * i - 3]) == 1 then
    return {0, i}
  end
end

local _, now_us = now()
local out = {1}
local record = owner .. '\n' .. ARGV[3]
for i = 1, n do
  local lock, fence, with, ttl = KEYS[4 * i - 3], KEYS[4 * i - 2], KEYS[4 * i], ARGV[3 + i]
  redis.call('SET', lock, owner, 'PX', ttl)
  local token = next_token(fence, fence_ttl, now_us)
  if not token then
    for j = 1, i do
      redis.call('DEL', KEYS[4 * j - 3]) -- give back what this took
    end
    return no_token(fence)
  end
  redis.call('SET', with, record, 'PX', ttl)
  out[i + 1] = token
end
return out
