-- Raise a lock's fence key to a fencing token just issued, never lowering
-- it: the second step of an acquisition while the resource's slot migrates
-- (see src/lock.rs), when the acquisition could touch the lock key alone.
--
-- KEYS[1]  the fence key
-- ARGV[1]  the fencing token issued
-- ARGV[2]  fence key ttl in milliseconds (>= the lock's)
--
-- Reply    the fence key's value now
local current = tonumber(redis.call('GET', KEYS[1]) or '0') or 0
local fence = tonumber(ARGV[1])
if fence > current then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  return fence
end
redis.call('PEXPIRE', KEYS[1], ARGV[2], 'GT')
return current
