-- lib/queue.lua: the waiting-process queue of a lock, and the hand-off to its head.
--
-- q  (zset): waiter id -> arrival time in µs (server clock); the order of hand-offs.
-- qx (zset): waiter id -> time in ms after which the entry is dead, because its process has
--            stopped re-checking; also '!'..owner -> expiry for abandoned acquire attempts.
-- A waiter id names one process-local queue of goroutines (see internal/waitq), not one
-- goroutine, so the queue holds one entry per waiting process and primitive. Each waiter
-- listens on its own channel, <channel prefix>:<waiter id>, so that a release wakes only the
-- process it concerns.
--
-- live_for() makes key live at least ms more milliseconds, never shortening its life: the
-- queue keys go away after the last of their entries could have died.
local function live_for(key, ms)
  if redis.call('PTTL', key) < ms then -- -1 (no TTL yet) included
    redis.call('PEXPIRE', key, ms)
  end
end

-- Messages: 'r <backup>' to the waiter a lock is reserved for (claim it; tell <backup>, if
-- any, once claimed); 'w <ms>' to the backup (re-check if the reservation lapses in <ms>);
-- 'c' to the backup (claimed: stop watching).

-- enqueue() registers waiter, keeping its place if it is queued already, with an entry that
-- dies live ms from now.
local function enqueue(q, qx, waiter, now_ms, now_us, live)
  redis.call('ZADD', q, 'NX', now_us, waiter) -- a waiter keeps its place when it re-checks
  redis.call('ZADD', qx, now_ms + live, waiter)
  live_for(q, live)
  live_for(qx, live)
end

-- requeue() puts waiter, which just took the lock, back at the tail with an entry that dies
-- live ms from now: live is a full lease plus slack, no shorter than any entry a waiter
-- behind a lease of the same length registers, so the keys' expiry is simply reset.
local function requeue(q, qx, waiter, now_ms, now_us, live)
  redis.call('ZADD', q, now_us, waiter)
  redis.call('ZADD', qx, now_ms + live, waiter)
  redis.call('PEXPIRE', q, live)
  redis.call('PEXPIRE', qx, live)
end

-- pass_on() gives a free lock to the oldest live waiter, or frees it when nobody waits.
--
-- The lock is not handed over outright: it becomes a reservation ('~'..id) that only that
-- waiter's process may claim, for `window` ms. Only that process is woken (one claim instead
-- of a herd of retries), and the next waiter in line is asked to watch the reservation, so that
-- a dead or stalled waiter costs at most `window`. Claiming is the acquire script itself, so
-- the claimer computes its own token and lease. Waiters whose entries lapsed are dropped.
local function pass_on(lock, q, qx, window, prefix, pub)
  local now_ms = now()
  for _ = 1, 1000 do
    local ids = redis.call('ZRANGE', q, 0, 1)
    local head = ids[1]
    if not head then
      break
    end
    redis.call('ZREM', q, head)
    if tonumber(redis.call('ZSCORE', qx, head) or '0') > now_ms then
      redis.call('SET', lock, '~' .. head, 'PX', window)
      local backup = ids[2] or ''
      redis.call(pub, prefix .. ':' .. head, 'r ' .. backup)
      if backup ~= '' then
        redis.call(pub, prefix .. ':' .. backup, 'w ' .. window)
      end
      return head
    end
    redis.call('ZREM', qx, head) -- dead: its process stopped re-checking
  end
  redis.call('DEL', lock)
  return ''
end
