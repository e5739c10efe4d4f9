-- lib/fence.lua: fencing tokens.

-- next_token() hands out the next fencing token of a name: max(last + 1, server time in µs).
-- Tokens strictly increase while the fence key lives (fence_ttl ms after the last one), and,
-- because they follow the clock, stay larger than any token a failed-over primary handed out
-- but never replicated once the promoted replica's clock has passed it, and than tokens whose
-- fence key expired (see docs/guarantees.md). One call in the common case: SET ... GET.
local function next_token(fence, fence_ttl, now_us)
  local token = now_us
  local last = redis.call('SET', fence, int(now_us), 'PX', fence_ttl, 'GET')
  if last and tonumber(last) >= token then
    token = tonumber(last) + 1 -- the clock is behind the last token: count on from it
    redis.call('SET', fence, int(token), 'PX', fence_ttl)
  end
  return token
end
