-- lib/ops.lua: exactly-once for commands a client may send twice or give up on.
--
-- ops (zset): request id -> ms (server clock) when it was applied; '!'..id -> ms when it was
-- voided. A client retries a command whose reply it lost under the same id, and the retry
-- finds it applied; a client that gives up on a command voids its id, so that the command
-- does nothing if it reaches Redis later, or is undone if it already ran. Entries are dropped
-- ops_ttl ms after they were written: far longer than a command stays in flight or a retry
-- goes on.
--
-- Requires lib/clock.lua.

-- op_state() returns 'applied', 'void' or nil for request id.
local function op_state(ops, id)
  local s = redis.call('ZMSCORE', ops, id, '!' .. id)
  if s[2] then
    return 'void'
  elseif s[1] then
    return 'applied'
  end
  return nil
end

-- op_mark() records id as applied ('') or voided ('!'). About one call in sixteen also drops
-- the entries older than ops_ttl (the key expires ops_ttl after the last call anyway): an
-- entry kept a little longer only answers a retry that no longer comes. Which calls trim
-- follows the server's clock and the id's last byte, so that no steady pattern of calls
-- escapes it for long.
local function op_mark(ops, mark, id, now_ms, ops_ttl)
  if (now_ms + (string.byte(id, -1) or 0)) % 16 == 0 then
    redis.call('ZREMRANGEBYSCORE', ops, '-inf', now_ms - ops_ttl)
  end
  if mark == '!' then
    redis.call('ZREM', ops, id)
  end
  redis.call('ZADD', ops, now_ms, mark .. id)
  redis.call('PEXPIRE', ops, ops_ttl)
end
