-- reentrant_unlock.lua: give back holds of a reentrant mutex; the last one hands it to the next
-- waiting process, or frees it.
--
-- KEYS[1] lock   KEYS[2] fence   KEYS[3] ops   KEYS[4] q   KEYS[5] qx   (as in reentrant_lock.lua)
-- ARGV[1] owner     the owner token
-- ARGV[2] id        request id; a retry sends the same id and is not counted twice
-- ARGV[3] by        holds to give back (1 for Unlock; all of a process's on Close)
-- ARGV[4] ops_ttl   ms request ids are remembered
-- ARGV[5] prefix    channel prefix; waiter w listens on prefix..':'..w
-- ARGV[6] pub       'PUBLISH' or 'SPUBLISH'
-- ARGV[7] token     the token of the hold the holds belong to
-- ARGV[8] window    ms a grant lasts unless its waiter adopts it
-- ARGV[9] fence_ttl ms the fence key outlives the last acquisition
-- Reply: {1, count}  the owner's count after this call (0: the mutex was handed on or freed)
--        {0}         the owner holds nothing, or a hold with another token (its own expired,
--                    and it or another process sharing the owner locked again): lost
--
-- At zero, the mutex goes to the oldest live waiting process inside Redis, as a mutex's
-- release does (lib/queue.lua, pass_on()): the lock becomes the grant 'g' = '~<waiter>:<token>'
-- for the hand-off window, with the next fencing token, and only that process is woken; its
-- head adopts the grant (reentrant_lock.lua). Nobody waiting, it is freed without a message.
-- Without waiters this is the calls of lib/ops.lua and HGET, HGET, EXISTS, DEL, TIME.

-- #include lib/clock.lua
-- #include lib/ops.lua

local lock, fence, ops = KEYS[1], KEYS[2], KEYS[3]
local field, id = 'o:' .. ARGV[1], ARGV[2]
if op_state(ops, id) == 'applied' then
  return {1, tonumber(redis.call('HGET', lock, field) or 0)}
end
local n = tonumber(redis.call('HGET', lock, field))
if not n or redis.call('HGET', lock, 't') ~= ARGV[7] then
  return {0}
end
n = n - tonumber(ARGV[3])
-- An HSET that adds the field, or a DEL that finds no key: the hold expired after the HGETs
-- (miniredis only: extend.lua). It was lost; a hash the HSET made of its own goes, and the
-- request is not marked applied (a retry reports the loss too).
if n > 0 then
  if redis.call('HSET', lock, field, n) == 1 then
    redis.call('DEL', lock)
    return {0}
  end
  op_mark(ops, '', id, now(), tonumber(ARGV[4]))
  return {1, n}
end
-- Nobody waits: free the mutex without making the queue's functions (a Lua closure each).
if redis.call('EXISTS', KEYS[4]) == 0 then
  if redis.call('DEL', lock) == 0 then
    return {0}
  end
  op_mark(ops, '', id, now(), tonumber(ARGV[4]))
  return {1, 0}
end

-- #include lib/fence.lua
-- #include lib/queue.lua

local _, had = pass_on(lock, fence, KEYS[4], KEYS[5], ARGV[8], ARGV[9], ARGV[5], ARGV[6], nil, true)
if not had then
  return {0} -- expired after the HGETs (miniredis only: extend.lua): passed on all the same, and lost
end
op_mark(ops, '', id, now(), tonumber(ARGV[4]))
return {1, 0}
