-- fenced_write.lua: the storage a lock protects, as Kleppmann's fencing asks of it: a write is
-- accepted only if its token is at least the largest token accepted so far.
--
-- KEYS[1] max      the largest token accepted
-- KEYS[2] log      accepted writes, in order: '<token> <hold> <phase>'
-- KEYS[3] rejected rejected writes, in order: '<token> <hold> <phase> <max>'
-- ARGV[1] token    the writer's fencing token (a decimal integer below 2^53)
-- ARGV[2] hold     the writer's hold id
-- ARGV[3] phase    'entry' or 'late'
-- Reply: 1 accepted, 0 rejected

local max = redis.call('GET', KEYS[1])
if max and tonumber(ARGV[1]) < tonumber(max) then
  redis.call('RPUSH', KEYS[3], ARGV[1] .. ' ' .. ARGV[2] .. ' ' .. ARGV[3] .. ' ' .. max)
  return 0
end
redis.call('SET', KEYS[1], ARGV[1])
redis.call('RPUSH', KEYS[2], ARGV[1] .. ' ' .. ARGV[2] .. ' ' .. ARGV[3])
return 1
