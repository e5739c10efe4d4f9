-- rwmutex_renew.lua: renew a read or write hold of a read-write mutex, and tell the waiters it
-- holds up when it now ends. The handle's renewal loop sends it, instead of extend.lua, for
-- every hold of a rwmutex.
--
-- KEYS and ARGV: see lib/rw.lua (mode and owner: the hold's; waiter and more unused).
-- Reply: 1 renewed; 0 the hold is gone (lapsed, released, or taken)
--
-- As extend.lua, a write hold's key gets a PX of ttl if it is still the owner's ('s'); a read
-- share is re-scored to ttl from now if it has not lapsed ('z'). Then a write hold tells the
-- waiting readers ('x <ttl> *': every process that waits to read listens to one channel) and
-- the first waiting writer ('x <ttl> <waiter>'); a read share tells the first waiting writer
-- when the last live share (or admission) now lapses. They re-check just after that, not
-- before (waitq.Room, Extended): while the holders renew, idle waiters send nothing for them
-- (they still re-check before their waiting marks lapse); a holder that died renews no more,
-- and its waiters are there a round trip after its lease ran out. A renewal nobody waits
-- behind costs one EXISTS more than extend.lua, before the shared Lua is included.

-- #include lib/clock.lua

local now_ms
if ARGV[1] == 'w' then
  -- (a PEXPIRE that finds no key: the hold expired in the script, on miniredis; extend.lua)
  if redis.call('GET', KEYS[1]) ~= ARGV[2] or redis.call('PEXPIRE', KEYS[1], ARGV[5]) == 0 then
    return 0
  end
  if redis.call('EXISTS', KEYS[3], KEYS[4]) == 0 then -- ww, rq: no writer or reader waits
    return 1
  end
else
  now_ms = now()
  local at = redis.call('ZSCORE', KEYS[2], ARGV[2])
  if not at or tonumber(at) <= now_ms then -- a share whose lease passed is lost, pruned or not
    return 0
  end
  if redis.call('ZADD', KEYS[2], now_ms + tonumber(ARGV[5]), ARGV[2]) == 1 then
    redis.call('DEL', KEYS[2]) -- the set expired after the ZSCORE (miniredis only): every share had lapsed
    return 0
  end
  live_for(KEYS[2], tonumber(ARGV[5]))
  if redis.call('EXISTS', KEYS[3]) == 0 then -- ww: no writer waits
    return 1
  end
end

-- #include lib/rw.lua

now_ms = now_ms or now()
if A.mode == 'w' then
  if redis.call('EXISTS', K.rq) == 1 then
    redis.call(A.pub, A.ch .. ':r', 'x ' .. int(A.ttl) .. ' *')
  end
  tell_writer(now_ms, A.ttl)
else
  tell_writer(now_ms, shares_left(now_ms))
end
return 1
