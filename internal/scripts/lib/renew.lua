-- lib/renew.lua: what a lock holder's renewal tells the queue.
--
-- Requires lib/clock.lua.

-- tell_head() tells the first waiter of queue q whose entry in qx is live (among the first
-- ten) that the lease it waits behind now ends in ttl ms: 'x <ttl> <waiter>', on its
-- process's channel (prefix..':'..<the waiter id up to its '/'>). The head then re-checks just
-- after that, and not before, unless a message comes: it sends nothing while the holder lives,
-- and finds the lock of a holder that died within a round trip of its expiry, instead of up to
-- a third of a lease later (the slack an uninformed waiter must add to stay at one re-check per
-- lease, see core.Backstop). A dead head (its entry lapsed, not yet pruned) must not take the
-- notices of the live one behind it.
local function tell_head(q, qx, prefix, pub, ttl)
  local ids = redis.call('ZRANGE', q, 0, 9)
  if ids[1] then
    local now_ms = now()
    for _, id in ipairs(ids) do
      if tonumber(redis.call('ZSCORE', qx, id) or '0') > now_ms then
        redis.call(pub, prefix .. ':' .. string.match(id, '^[^/]*'), 'x ' .. ttl .. ' ' .. id)
        return
      end
    end
  end
end
