-- lib/rel.lua: the record of a claim's recent releases.
--
-- A release is retried after a connection error, and a retry that finds the claim not its own
-- must tell an earlier attempt that went through (its reply lost on the wire) from a claim
-- that was lost meanwhile (it expired, or Redis restarted empty). The record answers: rel is a
-- list of the owner values of the last releases of the name, newest first, kept for a lease.
-- An owner value is unique per acquisition, so finding it there means this very hold was
-- released. Only releases of the same name can push it out: the list keeps the last rel_keep
-- releases at least (up to 2 * rel_keep - 1), and a retry that comes after more of them than
-- it keeps reports a loss, the safe side (a loss is never reported as a release).

local rel_keep = 16

-- released() reports whether owner's hold was released (and recorded) within the last
-- rel_keep releases of the name (or a few more) and a lease.
local function released(rel, owner)
  return redis.call('LPOS', rel, owner) ~= false
end

-- record_release() records owner's release, kept ttl ms. The list is cut back to rel_keep
-- once it reaches twice that, not at every release: a release then costs two calls here, not
-- three (an uncontended mutex Lock+Unlock is 9 Redis commands in all).
local function record_release(rel, owner, ttl)
  if redis.call('LPUSH', rel, owner) >= 2 * rel_keep then
    redis.call('LTRIM', rel, 0, rel_keep - 1)
  end
  redis.call('PEXPIRE', rel, ttl)
end
