-- mutex_acquire.lua: take a mutex, or join its queue.
--
-- KEYS[1] lock   the mutex: the holder's owner value ('~<waiter>:<token>' for a grant)
-- KEYS[2] fence  the last fencing token handed out for this name
-- KEYS[3] q      queue: waiter id -> arrival (µs)
-- KEYS[4] qx     queue: waiter id -> entry deadline (ms)
-- ARGV[1] owner      value that identifies this acquisition (unique per attempt)
-- ARGV[2] ttl        lease in ms
-- ARGV[3] fence_ttl  ms the fence key outlives the last acquisition
-- ARGV[4] waiter     waiter id of the caller's process queue; '' for TryLock (never queues)
-- ARGV[5] flags      one character each, '1' or '0':
--                    [1] requeue: more goroutines of this process wait; keep it queued, at the tail
--                    [2] queued: the waiter may be in the queue; a success must take it out
--                    [3] granted: a grant to the waiter was announced; look for it first
-- ARGV[6] slack      ms a queue entry outlives the lease it waits behind (the waiter re-checks before)
-- ARGV[7] prefix     channel prefix; waiter w listens on prefix..':'..w
-- ARGV[8] pub        'PUBLISH' or 'SPUBLISH'
-- ARGV[9] backup     the waiters watching a grant to this waiter, comma-separated ('' if none)
-- ARGV[10] last      the largest token the caller's process queue acquired ('0' if none):
--                    grants up to it were taken by one of its goroutines already
-- Reply: {1, token}            acquired; token is the fencing token
--        {0, pttl, granted, floor, first}  not acquired: the lock (or a grant to another
--                              waiter, not yet confirmed: granted = 1) ends in pttl ms unless
--                              renewed; floor is the last token handed out: every grant made
--                              before this call has a token up to it, every later one a larger
--                              token; first = 1 if the caller's process heads the queue (each
--                              renewal tells it when the lease now ends: mutex_renew.lua)
--
-- A grant to the caller's waiter id whose message the caller missed (or could not use in time)
-- is adopted here, unless its token shows that a goroutine of the same process took it
-- already: the caller becomes its holder, with its token.
--
-- The fast path (a free mutex, a caller not queued) is three calls: SET NX, TIME, SET GET.
--
-- A holder's value gets a '+' after it once a waiter queues behind it (mark_waited,
-- lib/queue.lua), or if it takes the lock while others wait: its release hands the lock on
-- then, and otherwise deletes it without looking at the queue (mutex_release.lua).

-- #include lib/clock.lua
-- #include lib/fence.lua

local lock, fence, q, qx = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local owner, ttl, waiter = ARGV[1], ARGV[2], ARGV[4]
local flags = ARGV[5]
local again, queued, granted = string.sub(flags, 1, 1) == '1', string.sub(flags, 2, 2) == '1', string.sub(flags, 3, 3) == '1'

-- An attempt whose caller gave up while it was in flight was voided by mutex_leave.lua; it
-- must not take the lock when it arrives late. The fast path looks for the void mark only if
-- the fence says that one may be live (taken, lib/fence.lua); every other path looks here.

-- The fast path: a caller with no place in the queue and no grant to look for takes a free
-- mutex. It comes before lib/queue.lua is included, so that it does not pay for making the
-- queue's functions (a Lua closure each, every run).
local fast = not (again or queued or granted)
if fast and redis.call('SET', lock, owner, 'NX', 'PX', ttl) then
  return taken(lock, fence, ARGV[3], qx, owner, {0, 0, 0})
end
if redis.call('ZSCORE', qx, '!' .. owner) then
  return {0, 0, 0}
end

-- #include lib/queue.lua

local token
local cur = false
if granted then
  cur = redis.call('GET', lock)
end
if cur or fast or not redis.call('SET', lock, owner, 'NX', 'PX', ttl) then
  cur = cur or redis.call('GET', lock)
  if granted_to(cur, waiter) and (tonumber(string.sub(cur, #waiter + 3)) or 0) > tonumber(ARGV[10]) then
    redis.call('SET', lock, owner, 'PX', ttl) -- adopt the grant
    token = tonumber(string.sub(cur, #waiter + 3))
    if ARGV[9] ~= '' then
      tell_each(ARGV[8], ARGV[7], ARGV[9], 'c') -- the watchers can stop watching
    end
  else
    local pttl = redis.call('PTTL', lock)
    if pttl == -2 then
      pttl = 0 -- expired since it was read: miniredis's clock moves within a script (Redis's does not); look again at once
    elseif pttl < 0 then
      pttl = tonumber(ttl) -- a lock key without a TTL is not ours to judge; wait as if it were fresh
    end
    if waiter ~= '' then
      local now_ms, now_us = now()
      enqueue(q, qx, waiter, now_ms, now_us, pttl + tonumber(ARGV[6]))
      mark_waited(lock, cur)
    end
    local g = 0
    if cur and string.sub(cur, 1, 1) == '~' then -- (cur is false if the lock lapsed since SET NX)
      g = 1
    end
    local floor = redis.pcall('GET', fence)
    local first = 0
    if waiter ~= '' and g == 0 and redis.call('ZRANGE', q, 0, 0)[1] == waiter then
      first = 1 -- the head: renewals of the lock will tell it when the lease ends (mutex_renew.lua)
    end
    return {0, pttl, g, type(floor) == 'string' and tonumber(floor) or 0, first}
  end
end

local now_ms, now_us
if again or not token then
  now_ms, now_us = now()
end
if not token then
  token = next_token(fence, ARGV[3], now_us)
  if not token then
    redis.call('DEL', lock) -- taken by the SET NX above: give it back
    return no_token(fence)
  end
end
if waiter ~= '' then
  if again then
    requeue(q, qx, waiter, now_ms, now_us, tonumber(ttl) + tonumber(ARGV[6]))
  elseif queued and redis.call('ZREM', q, waiter) == 1 then
    redis.call('ZREM', qx, waiter)
  end
end
if redis.call('EXISTS', q) == 1 then
  mark_waited(lock, owner) -- others wait: the release must look for them
end
return {1, token}
