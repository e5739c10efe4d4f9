-- rate_reserve.lua: the decision of Allow, Reserve and Wait: take n tokens now, or reserve
-- them for when the bucket will have them, if that is no later than max_wait from now
-- (x/time/rate's reserveN). A refusal changes nothing.
--
-- KEYS and ARGV: see lib/rate.lua (limit, burst, n, max_wait, retention).
-- Reply: {code, wait µs, at µs, tokens, limit, burst}, all strings: code '1' taken (at = now
-- + wait is the time to act, server clock), '0' refused: n exceeds the burst, '2' refused:
-- the wait would exceed max_wait, '3' refused: the tokens would never come (a zero limit);
-- tokens after the decision; the limit and burst in force ('inf' for no limit, which takes
-- any n at once and writes nothing).

-- #include lib/clock.lua
-- #include lib/rate.lua

local b, now = begin()
local limit, burst = settings(b)
if b.limit == math.huge then
  return {'1', '0', int(now), flt(b.burst), limit, burst}
end
local tokens = advance(b, now) - A.n
local wait = 0
if tokens < 0 then
  if b.limit <= 0 then
    wait = math.huge
  else
    wait = math.ceil(-tokens / b.limit * 1e6)
  end
end
local code = '1'
if A.n > b.burst then
  code = '0'
elseif wait == math.huge then
  code = '3'
elseif A.max_wait ~= 'inf' and wait > tonumber(A.max_wait) then
  code = '2'
end
if code ~= '1' then
  if wait == math.huge then
    wait = -1
  end
  return {code, int(wait), '0', flt(advance(b, now)), limit, burst}
end
local at = now + wait
save(b, tokens, now, at)
return {'1', int(wait), int(at), flt(tokens), limit, burst}
