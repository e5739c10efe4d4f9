-- rwmutex_lock.lua: RLock or Lock attempt of a read-write mutex.
--
-- KEYS and ARGV: see lib/rw.lua.
-- Reply: {1, token}  acquired: a writer's new fencing token; for a reader, the name's last
--                    token: the last writer's, or, if the fence keeps none (never written,
--                    Redis restarted empty, the retention passed), a new one taken from the
--                    server clock as a writer's would be, which every later write exceeds
--        {0, wait, told}
--                    not acquired: re-check within wait ms if nothing is published; the
--                    waiter id, if any, is marked as waiting until wait + slack. told = 1 if
--                    what the caller waits behind ends in wait ms unless renewed, and every
--                    renewal tells it anew ('x', lib/rw.lua): a reader behind a write hold, the
--                    first waiting writer behind a write hold or read shares. It re-checks just
--                    after that, not later; told = 0 if wait is only a backstop.
--        {-1}        the attempt was voided by its sender (rwmutex_leave.lua): nothing done
--
-- A reader gets in unless a writer holds, or a writer waits and the reader was not admitted
-- by the last writer's Unlock. A writer gets in when no writer holds, no reader holds a live
-- share, no admitted reader is still to come, and it is the first waiting writer (a try, which
-- has no waiter id, only if no writer waits at all).

-- #include lib/clock.lua
-- #include lib/fence.lua
-- #include lib/ops.lua
-- #include lib/rw.lua

if op_state(K.ops, A.owner) == 'void' then
  return {-1}
end
-- The fast path of a writer: nobody holds, waits or is admitted (the keys of all of them are
-- gone), and no other writer of the caller's process waits behind it: take it.
if A.mode == 'w' and not A.more and redis.call('EXISTS', K.w, K.r, K.ra, K.ww, K.wo, K.rq) == 0 then
  redis.call('SET', K.w, A.owner, 'PX', A.ttl)
  return taken(K.w, K.fence, A.fence_ttl)
end
-- share() gives the caller a read share and returns its token: the name's last token. If the
-- fence keeps none, the reader takes one from the clock (and keeps it as the last), so that a
-- read token never goes below a token handed out before the fence was lost (Redis restarted
-- empty): readers after it share it, and the next writer's is larger. A value that is not a
-- token (written by someone else) gives 0.
local function share(now_ms, now_us)
  local f = redis.call('GET', K.fence)
  local token = f and (tonumber(f) or 0) or next_token(K.fence, A.fence_ttl, now_us)
  redis.call('ZADD', K.r, now_ms + A.ttl, A.owner)
  live_for(K.r, A.ttl)
  if A.waiter ~= '' then
    redis.call('ZREM', K.rq, A.waiter)
    if not A.more then
      redis.call('ZREM', K.ra, A.waiter) -- the last of its process: the admission is used
    end
  end
  return token
end
-- The fast path of a reader: no writer holds or waits (their keys are gone), so nothing is in
-- its way and no waiting writer is to be told of the shares: take one. Lapsed entries are left
-- for the next script that decides on them (every other path prunes first).
if A.mode == 'r' and redis.call('EXISTS', K.w, K.ww) == 0 then
  local now_ms, now_us = now()
  return {1, share(now_ms, now_us)}
end
local now_ms, now_us = now()
prune(now_ms)
local wait = writer_left()

if A.mode == 'r' then
  local told = wait >= 0 and 1 or 0 -- behind a write hold, whose renewals tell the readers
  if wait < 0 and (A.waiter == '' or not redis.call('ZSCORE', K.ra, A.waiter)) then
    wait = left(K.ww, now_ms)
  end
  if wait >= 0 then
    mark(K.rq, now_ms, wait)
    return {0, wait, told}
  end
  local token = share(now_ms, now_us)
  if redis.call('EXISTS', K.ww) == 1 then
    -- An admitted reader, ahead of a waiting writer: tell it when the shares now end.
    tell_writer(now_ms, shares_left(now_ms))
  end
  return {1, token}
end

-- behind: the caller waits behind a write hold or read shares, whose renewals tell the first
-- waiting writer when they now end (not behind another writer's turn: that is a backstop).
local behind = wait >= 0
if wait < 0 then
  wait = shares_left(now_ms)
  behind = wait >= 0
end
if wait < 0 then
  -- Free: is it this writer's turn?
  local first = first_writer(now_ms)
  if first and first ~= A.waiter then
    wait = math.max(tonumber(redis.call('ZSCORE', K.ww, first)) - now_ms, 0) -- until its mark lapses
  end
end
if wait >= 0 then
  mark(K.ww, now_ms, wait)
  queue_writer(now_us, wait, false)
  local told = behind and A.waiter ~= '' and first_writer(now_ms) == A.waiter
  return {0, wait, told and 1 or 0}
end
local token = next_token(K.fence, A.fence_ttl, now_us)
if not token then
  return no_token(K.fence)
end
redis.call('SET', K.w, A.owner, 'PX', A.ttl)
if A.waiter ~= '' then
  if A.more then
    -- Other writers of this process wait: keep the mark (readers stay behind them) for as
    -- long as the hold plus slack, as a wait behind it would, and go to the tail of the
    -- order, behind the writers of other processes.
    mark(K.ww, now_ms, A.ttl)
    queue_writer(now_us, A.ttl, true)
  else
    redis.call('ZREM', K.ww, A.waiter)
    redis.call('ZREM', K.wo, A.waiter)
  end
end
return {1, token}
