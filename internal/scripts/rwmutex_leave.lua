-- rwmutex_leave.lua: clean up after a reader or writer that gave up waiting.
--
-- KEYS and ARGV: see lib/rw.lua. waiter is the id to take out of the waiting marks ('' when
-- other goroutines of the process still wait); owner is the value of an attempt whose reply
-- the caller did not wait for ('' if none).
-- Reply: 1 if the attempt had acquired and was undone, else 0
--
-- Cancelling a context does not cancel a command Redis already received, and the attempt and
-- this script may travel on different connections: if the attempt ran, undo it; if not, void
-- it so that it does nothing when it arrives.

-- #include lib/clock.lua
-- #include lib/ops.lua
-- #include lib/rw.lua

local now_ms = now()
prune(now_ms)
local undone = 0
if A.mode == 'w' then
  if A.owner ~= '' then
    if redis.call('GET', K.w) == A.owner then
      redis.call('DEL', K.w)
      undone = 1
    else
      op_mark(K.ops, '!', A.owner, now_ms, A.ops_ttl)
    end
  end
  local left_order = 0
  if A.waiter ~= '' then
    redis.call('ZREM', K.ww, A.waiter)
    left_order = redis.call('ZREM', K.wo, A.waiter)
  end
  if undone == 1 then
    after_write(now_ms)
  elseif redis.call('EXISTS', K.ww) == 0 and redis.call('EXISTS', K.w) == 0 and redis.call('EXISTS', K.rq) == 1 then
    -- The readers were waiting only for writers, and the last one gave up.
    redis.call(A.pub, A.ch .. ':r', 'r')
  elseif left_order == 1 and redis.call('EXISTS', K.w) == 0 then
    -- A writer whose turn may have come left: the next one looks again.
    redis.call(A.pub, A.ch .. ':w', 'w')
  end
  return undone
end
if A.owner ~= '' then
  if redis.call('ZREM', K.r, A.owner) == 1 then
    undone = 1
  else
    op_mark(K.ops, '!', A.owner, now_ms, A.ops_ttl)
  end
end
if A.waiter ~= '' then
  redis.call('ZREM', K.rq, A.waiter)
  redis.call('ZREM', K.ra, A.waiter)
end
after_read(now_ms)
return undone
