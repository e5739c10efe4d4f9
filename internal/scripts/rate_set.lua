-- rate_set.lua: SetLimit and SetBurst: store a new limit or burst for every process, after
-- bringing the tokens up to now under the old ones (x/time/rate's SetLimitAt, SetBurstAt).
-- Stored settings keep the bucket for retention after its last use (lib/rate.lua).
--
-- KEYS and ARGV: see lib/rate.lua (limit, burst, retention, new_limit, new_burst).
-- Reply: {tokens, limit, burst}, strings: the tokens now, the limit and burst in force.

-- #include lib/clock.lua
-- #include lib/rate.lua

local b, now = begin()
local tokens = advance(b, now)
store(b, A.new_limit, A.new_burst)
save(b, tokens, now, b.event)
local limit, burst = settings(b)
return {flt(tokens), limit, burst}
