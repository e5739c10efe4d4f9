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
-- A waiter id is '<process>' (mutex: one entry per waiting process) or '<process>/<call>'
-- (fair, semaphore: one entry per waiting call); either way the messages for it go to its
-- process's channel, <channel prefix>:<process>, and name it last:
-- 'g <token> <backup> <ms> <waiter>' to the waiter a lock is granted to, for <ms> unless it
-- confirms (the window is the releaser's: the grantee counts its deadline with it, not with
-- its own setting; <backup> lists the watchers, '<id>[,<id>]'); 'w <ms> <waiter>' to each
-- watcher (re-check if the grant is not confirmed within <ms>); 'c <waiter>' to each watcher
-- (confirmed); 'x <ms> <waiter>' to the head of a
-- queue when the holder renews (mutex_renew.lua, reentrant_renew.lua: the lease now ends in
-- <ms>).
--
-- A queue may keep a record of who holds the lock (election: the leader): rec, a table
-- {values = <hash>, channel = <observers' channel>, live = <the lease in ms>}, or nil for a
-- plain lock (record() makes it from a script's optional KEYS and ARGV). The values hash
-- holds each waiter's value (waiter id -> value), the holder's waiter id under '@' and its
-- token under '@t' (the fence key may expire while it holds), and the number of
-- announcements under '#'; every change of holder, and of the holder's value, is
-- announced on the channel (announce()). A holder is recorded and announced only once it has
-- taken the lock (or adopted a grant made to it) and found the reply in time to use it: its
-- call then renews the hold (election_renew.lua: crown()) before it returns. A grant made at a
-- release (pass_on()) is not recorded: the waiter it goes to may be dead; nor is a take whose
-- reply comes too late (its caller gives it back). Until then the record names nobody.
--
-- Requires lib/clock.lua and lib/fence.lua.

-- enqueue() registers waiter, keeping its place if it is queued already, with an entry that
-- dies live ms from now.
local function enqueue(q, qx, waiter, now_ms, now_us, live)
  redis.call('ZREMRANGEBYSCORE', qx, '-inf', now_ms) -- lapsed entries and void marks
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

-- tell() publishes msg, for waiter id, on its process's channel.
local function tell(pub, prefix, id, msg)
  redis.call(pub, prefix .. ':' .. string.match(id, '^[^/]*'), msg .. ' ' .. id)
end

-- tell_each() tells msg to each waiter of ids, a comma-separated list (the watchers of a grant).
local function tell_each(pub, prefix, ids, msg)
  for id in string.gmatch(ids, '[^,]+') do
    tell(pub, prefix, id, msg)
  end
end

-- mark_voids() marks fence for a void mark just written in qx, kept void_ttl ms: a '0' before
-- its token (next_token, lib/fence.lua), and a life at least as long as the void mark's, so
-- that a fast-path take looks for the void mark (taken).
local function mark_voids(fence, void_ttl)
  local f = redis.pcall('GET', fence)
  if type(f) == 'table' then
    return -- another type: next_token refuses it, so no take can go through
  end
  if f and string.sub(f, 1, 1) ~= '0' then
    -- XX: miniredis, which expires keys between a script's commands, may have dropped it.
    f = redis.call('SET', fence, '0' .. f, 'XX', 'KEEPTTL')
  end
  if not (f and live_for(fence, void_ttl)) then
    redis.call('SET', fence, '0', 'PX', void_ttl) -- no fence: a token of 0, marked
  end
end

-- mark_waited() marks the lock, held by value cur, as waited for: a '+' after a holder's owner
-- value, so that its release (mutex_release.lua) hands the lock on rather than deleting it. A
-- grant ('~...') is not marked: the release of one always looks at the queue. Only a value
-- shaped as distsync writes them is marked: '<handle id>:<sequence>' (a mutex's owner value)
-- or '<process>/<call>' (a fair lock's waiter id), which end with a letter or digit; anything
-- else in the key is not distsync's to change.
local function mark_waited(lock, cur)
  if cur and string.sub(cur, 1, 1) ~= '~' and string.find(cur, '[:/]') and string.find(cur, '%w$') then
    redis.call('SET', lock, cur .. '+', 'XX', 'KEEPTTL') -- XX: miniredis may have expired it since
  end
end

-- granted_to() reports whether the lock value cur is a grant to waiter.
local function granted_to(cur, waiter)
  local mine = '~' .. waiter .. ':'
  return waiter ~= '' and cur and string.sub(cur, 1, #mine) == mine
end

-- announce() records waiter, which was just given the lock with token, as the holder in rec,
-- forgets the value of the holder it replaces, and tells the observers:
-- '<token> <seq> <pttl> <waiter> <value>', seq counting announcements (it orders the value
-- changes of one term) and pttl the lock's remaining lease in ms.
local function announce(rec, pub, lock, waiter, token)
  local prev = redis.call('HGET', rec.values, '@')
  if prev and prev ~= waiter then
    redis.call('HDEL', rec.values, prev)
  end
  redis.call('HSET', rec.values, '@', waiter, '@t', int(tonumber(token)))
  local seq = redis.call('HINCRBY', rec.values, '#', 1)
  local pttl = redis.call('PTTL', lock)
  live_for(rec.values, math.max(pttl, rec.live))
  local value = redis.call('HGET', rec.values, waiter) or ''
  redis.call(pub, rec.channel, int(tonumber(token)) .. ' ' .. seq .. ' ' .. pttl .. ' ' .. waiter .. ' ' .. value)
end

-- crown() records waiter as the holder, with token, and announces it, unless the record
-- names it already (every renewal of the hold sends it).
local function crown(rec, pub, lock, waiter, token)
  if redis.call('HGET', rec.values, '@') == waiter and redis.call('HGET', rec.values, '@t') == int(tonumber(token)) then
    return
  end
  announce(rec, pub, lock, waiter, token)
end

-- unseat() makes rec name no holder (the lock was just granted to a waiter that has not
-- confirmed it), dropping the value of the holder it named, unless that is waiter.
local function unseat(rec, waiter)
  local prev = redis.call('HGET', rec.values, '@')
  if prev then
    if prev ~= waiter then
      redis.call('HDEL', rec.values, prev)
    end
    redis.call('HDEL', rec.values, '@', '@t')
  end
end

-- record() returns the record of a script whose KEYS[key] is the values hash and whose
-- ARGV[arg], ARGV[arg + 1] are the observers' channel and the lease in ms; nil if the script
-- was given no values hash (a plain lock).
local function record(key, arg)
  if not KEYS[key] then
    return nil
  end
  return {values = KEYS[key], channel = ARGV[arg], live = tonumber(ARGV[arg + 1])}
end

-- forget() drops waiter's value from rec (nil: no record), and its holder mark if it held.
local function forget(rec, waiter)
  if rec then
    redis.call('HDEL', rec.values, waiter)
    if redis.call('HGET', rec.values, '@') == waiter then
      redis.call('HDEL', rec.values, '@', '@t')
    end
  end
end

-- pass_on() hands a free lock to the oldest live waiter, or frees it when nobody waits.
--
-- The lock is granted outright: its value becomes '~<waiter>:<token>', the owner value of the
-- new holder, with the fencing token computed here, and only that waiter's process is woken.
-- The grant lasts `window` ms; the new holder confirms it (mutex_confirm.lua extends it to its
-- lease) right after it wakes, without making its Lock wait for that. The next two live
-- waiters in line watch the grant, the first (the backup) for `window` ms, the second for
-- twice that: a dead or stalled grantee costs the others one window, and a dead backup behind
-- it one more, not the lease they would otherwise wait out (a grant that lapses publishes
-- nothing). The grant's message names both watchers ('<backup>,<second>'), and the confirm,
-- or the adoption of the grant, tells both to stop.
-- Waiters whose entries lapsed are dropped. If the fence key holds no token (lib/fence.lua),
-- nobody can be granted the lock: it is freed, and the head is told to re-check (its attempt
-- then reports the fence's error). With a record (rec), the record names no holder until
-- the new holder has adopted the grant and recorded itself (crown()), and the values of dead
-- waiters are dropped. With hash (a reentrant mutex, whose lock is a hash of owner counts),
-- the grant is the lock's only field, 'g' = '~<waiter>:<token>', instead of its string value.
-- It returns the waiter granted ('' if none), and whether lock was there when it was written:
-- a release that found its claim a moment before and sees it gone here had it expire in the
-- script (miniredis only: extend.lua).
local function pass_on(lock, fence, q, qx, window, fence_ttl, prefix, pub, rec, hash)
  local now_ms, now_us
  for _ = 1, 1000 do
    local ids = redis.call('ZRANGE', q, 0, 9)
    local head = ids[1]
    if not head then
      break
    end
    redis.call('ZREM', q, head)
    if not now_ms then
      now_ms, now_us = now()
    end
    if tonumber(redis.call('ZSCORE', qx, head) or '0') > now_ms then
      local token = next_token(fence, fence_ttl, now_us)
      if not token then
        local had = redis.call('DEL', lock) == 1
        tell(pub, prefix, head, 'r')
        return '', had
      end
      token = int(token)
      local had
      if hash then
        had = redis.call('DEL', lock) == 1
        redis.call('HSET', lock, 'g', '~' .. head .. ':' .. token)
        redis.call('PEXPIRE', lock, window)
      else
        had = redis.call('SET', lock, '~' .. head .. ':' .. token, 'PX', window, 'GET') ~= false
      end
      -- The watchers are the next two live waiters: a dead one would watch nothing.
      local watchers = {}
      for i = 2, #ids do
        if tonumber(redis.call('ZSCORE', qx, ids[i]) or '0') > now_ms then
          watchers[#watchers + 1] = ids[i]
          if #watchers == 2 then
            break
          end
        end
      end
      redis.call('ZREM', qx, head)
      if rec then
        unseat(rec, head)
      end
      tell(pub, prefix, head, 'g ' .. token .. ' ' .. table.concat(watchers, ',') .. ' ' .. window)
      for i, w in ipairs(watchers) do
        tell(pub, prefix, w, 'w ' .. int(i * tonumber(window)))
      end
      return head, had
    end
    redis.call('ZREM', qx, head) -- dead: its process stopped re-checking
    forget(rec, head)
  end
  return '', redis.call('DEL', lock) == 1
end
