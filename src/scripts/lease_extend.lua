-- Extend a lease, only if it is still live.
--
-- KEYS[1]  sorted set of live leases (see lease_acquire.lua)
-- ARGV[1]  the lease id
-- ARGV[2]  new lease ttl in milliseconds, counted from now (>= 1)
--
-- Reply    1 when extended; 0 when the lease expired or was reclaimed (an
--          expired entry still present is removed).
--
-- The key's ttl is raised to cover the new expiry, never lowered: it
-- follows the longest lease.
local score = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not score then
  return 0
end
if tonumber(score) <= NOW_MS then
  redis.call('ZREM', KEYS[1], ARGV[1])
  return 0
end
local ttl = tonumber(ARGV[2])
-- '%.0f': Redis would format a Lua number itself, maybe in exponent form.
redis.call('ZADD', KEYS[1], 'XX', string.format('%.0f', NOW_MS + ttl), ARGV[1])
if redis.call('PTTL', KEYS[1]) < ttl then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 1
