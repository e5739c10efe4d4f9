-- extend.lua: renew one lease if its holder still owns it. The handle's renewal loop sends
-- one call per held lease, pipelined per Redis node on each tick.
--
-- KEYS[1] key    the key that carries the claim
-- ARGV[1] kind   's': a string whose value is the owner
-- ARGV[2] owner  the holder's owner value
-- ARGV[3] ttl    new lease in ms, counted from now on the server's clock
-- Reply: 1 renewed; 0 the claim is gone (expired or deleted) or belongs to someone else

if ARGV[1] == 's' then
  if redis.call('GET', KEYS[1]) == ARGV[2] then
    redis.call('PEXPIRE', KEYS[1], ARGV[3])
    return 1
  end
  return 0
end
return redis.error_reply('distsync: unknown lease kind ' .. tostring(ARGV[1]))
