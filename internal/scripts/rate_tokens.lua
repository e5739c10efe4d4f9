-- rate_tokens.lua: the tokens a limiter's bucket has now, and its limit and burst in force.
-- It writes nothing.
--
-- KEYS and ARGV: see lib/rate.lua (limit, burst).
-- Reply: {tokens, limit, burst}, strings.

-- #include lib/clock.lua
-- #include lib/rate.lua

local b, now = begin()
local limit, burst = settings(b)
return {flt(advance(b, now)), limit, burst}
