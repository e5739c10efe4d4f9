-- rate_cancel.lua: give back the tokens of a reservation that will not be used, as far as
-- later reservations have not counted on them (x/time/rate's CancelAt): n minus what the
-- reservations made after it took, nothing if its time to act has passed.
--
-- KEYS and ARGV: see lib/rate.lua (limit, burst, n, retention, at, rlimit).
-- Reply: {restored, tokens, limit, burst}, strings: the tokens given back (0 if none), the
-- tokens now, and the limit and burst in force.

-- #include lib/clock.lua
-- #include lib/rate.lua

local b, now = begin()
local limit, burst = settings(b)
local rlimit = limit_of(A.rlimit)
if rlimit == math.huge or A.n == 0 or A.at < now or not b.tokens then
  -- nothing to give back: no limit, no tokens, too late, or the bucket is full (gone)
  return {'0', flt(advance(b, now)), limit, burst}
end
-- The time between this reservation's time to act and the latest one is what later
-- reservations took of the tokens: those stay taken.
local restore = A.n - rlimit * (b.event - A.at) / 1e6
if restore <= 0 then
  return {'0', flt(advance(b, now)), limit, burst}
end
local tokens = math.min(advance(b, now) + restore, b.burst)
local event = b.event
if A.at == b.event and rlimit > 0 then
  local prev = A.at - math.floor(A.n / rlimit * 1e6)
  if prev >= now then
    event = prev
  end
end
save(b, tokens, now, event)
return {flt(restore), flt(tokens), limit, burst}
