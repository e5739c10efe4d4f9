-- reentrant_abandon.lua: clean up after waiters of a reentrant mutex that gave up, and undo a
-- lock attempt whose sender gave up on it (its context ended, or its reply was lost), whether
-- or not it reached Redis yet.
--
-- KEYS[1] lock   KEYS[2] fence   KEYS[3] ops   KEYS[4] q   KEYS[5] qx   (as in reentrant_lock.lua)
-- ARGV[1] owner     the owner token of the attempt ('' if there is none to undo)
-- ARGV[2] id        the attempt's request id ('' if none)
-- ARGV[3] ops_ttl   ms request ids are remembered
-- ARGV[4] waiter    the waiter id of the caller's process
-- ARGV[5] window    ms a grant passed on here lasts unless adopted
-- ARGV[6] fence_ttl ms the fence key outlives the last acquisition
-- ARGV[7] prefix    channel prefix; waiter w listens on prefix..':'..w
-- ARGV[8] pub       'PUBLISH' or 'SPUBLISH'
-- ARGV[9] last      the largest token the waiter's process acquired
-- ARGV[10] dequeue  '1': no goroutine of the process waits any more: take the waiter out of
--                   the queue, and pass on a grant made to it with a token above last
-- ARGV[11] grant    a token whose grant to the waiter nobody will take ('0' if none): passed
--                   on if the lock is still exactly that grant
-- Reply: {undone, given}: undone is 1 if the attempt had been counted and was undone (or, for
--        a re-entry, its hold is gone), 0 if it had not run (it never will) or was counted in
--        an earlier hold than the current one (a take whose hold is gone included); given is the token of a grant to the waiter that was passed on
--        (0 if none): its message may still be on its way to the process, which must not take it
--
-- The caller runs this before its Lock returns (as mutex_leave.lua): a grant that an Unlock
-- made to the departing process just before goes on to the next waiter at once, rather than
-- lapse after the hand-off window. Cancelling a context does not cancel a command Redis
-- already received, and the attempt and this script may travel on different connections:
-- either may run first. Voiding the id covers both orders.

-- #include lib/clock.lua
-- #include lib/fence.lua
-- #include lib/ops.lua
-- #include lib/queue.lua

local lock, fence, ops, q, qx = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local waiter = ARGV[4]
local function hand_on()
  pass_on(lock, fence, q, qx, ARGV[5], ARGV[6], ARGV[7], ARGV[8], nil, true)
end

local given = 0
local g = redis.call('HGET', lock, 'g')
local token = granted_to(g, waiter) and tonumber(string.sub(g, #waiter + 3))
if ARGV[10] == '1' and redis.call('ZREM', q, waiter) == 1 then
  redis.call('ZREM', qx, waiter)
end
if token and (ARGV[10] == '1' and token > tonumber(ARGV[9]) or ARGV[11] ~= '0' and g == '~' .. waiter .. ':' .. ARGV[11]) then
  hand_on()
  given = token
end

local id = ARGV[2]
if id == '' or redis.call('ZSCORE', ops, '!' .. id) then
  return {0, given}
end
local field = 'o:' .. ARGV[1]
-- A take keeps its id in the hold it made ('a', reentrant_lock.lua): if it is there, that hold
-- is the attempt's. A re-entry's id is in ops, with the ms it was counted at.
local made = redis.call('HGET', lock, 'a') == id
local applied = not made and redis.call('ZSCORE', ops, id)
op_mark(ops, '!', id, now(), tonumber(ARGV[3]))
if not (made or applied) then
  return {0, given} -- it had not run (it never will), or it was a take whose hold is gone
end
local n = tonumber(redis.call('HGET', lock, field))
if not n then
  return {1, given} -- counted, but the hold is gone already
end
-- A re-entry was counted in the hold that exists now only if that hold was created no later
-- than the attempt: its token follows the server clock in µs (lib/fence.lua; a grant's token
-- is computed by the release that made it, before the attempt that adopted it). A hold
-- created after it (the counted one expired, and the owner locked again) is not this
-- attempt's to undo. A token ahead of the clock (the clock stepped back) makes this refuse an
-- undo it could have made: the count then stays one too high until the hold's lease runs out,
-- never too low.
if applied and tonumber(redis.call('HGET', lock, 't') or 0) >= (tonumber(applied) + 1) * 1000 then
  return {0, given}
end
if n <= 1 then
  hand_on() -- the hold was the attempt's alone: the next waiting process gets the mutex
elseif redis.call('HSET', lock, field, n - 1) == 1 then
  -- The hold expired after the HGETs (miniredis only: extend.lua): the hash the HSET made of
  -- its own, without a token or a TTL, must not stay.
  redis.call('DEL', lock)
end
return {1, given}
