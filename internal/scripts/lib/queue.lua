-- lib/queue.lua: the waiting-process queue of a lock, and the hand-off to its head.
--
-- q  (zset): waiter id -> arrival time in µs (server clock); the order of hand-offs.
-- qx (zset): waiter id -> time in ms after which the entry is dead, because its process has
--            stopped re-checking; also '!'..owner -> expiry for abandoned acquire attempts.
-- A waiter id names one process-local queue of goroutines (see internal/localq), not one
-- goroutine, so the queue holds one entry per waiting process and primitive.

-- keep_until() makes sure both queue keys live at least ms more milliseconds: every member
-- carries its own deadline in qx, and the keys go away with the last of them.
local function keep_until(q, qx, ms)
  if redis.call('PTTL', qx) < ms then
    redis.call('PEXPIRE', qx, ms)
  end
  local p = redis.call('PTTL', q) -- -2: no queue (only void marks in qx); -1: new, no TTL yet
  if p ~= -2 and p < ms then
    redis.call('PEXPIRE', q, ms)
  end
end

-- pass_on() gives a free lock to the oldest live waiter, or frees it when nobody waits.
--
-- The lock is not handed over outright: it becomes a reservation ('~'..id) that only that
-- waiter's process may claim, for `window` ms. The reservation is published so that exactly
-- one process acts on the release (one claim instead of a herd of retries), while a dead or
-- stalled waiter costs at most `window` before everybody else re-checks. Claiming is the
-- acquire script itself, so the claimer computes its own token and lease.
local function pass_on(lock, q, qx, window, channel, pub, now_ms)
  local dead = redis.call('ZRANGEBYSCORE', qx, '-inf', now_ms)
  if #dead > 0 then
    redis.call('ZREM', q, unpack(dead))
    redis.call('ZREMRANGEBYSCORE', qx, '-inf', now_ms)
  end
  local head = redis.call('ZRANGE', q, 0, 0)[1]
  if head then
    redis.call('ZREM', q, head)
    redis.call('ZREM', qx, head)
    redis.call('SET', lock, '~' .. head, 'PX', window)
    redis.call(pub, channel, 'r ' .. head .. ' ' .. window)
    return head
  end
  redis.call('DEL', lock)
  redis.call(pub, channel, 'f')
  return ''
end
