-- The remaining ttl of a lock, only if it is still held with our token.
--
-- KEYS[1]  the lock key
-- KEYS[2]  the fence key (not read; every lock script takes the same keys)
-- ARGV[1]  our token
--
-- Reply    the lock key's PTTL in milliseconds; -2 when it is not ours (any
--          more).
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PTTL', KEYS[1])
end
return -2
