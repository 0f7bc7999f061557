-- Return a lease.
--
-- KEYS[1]  sorted set of live leases (see lease_acquire.lua)
-- ARGV[1]  the lease id
--
-- Reply    1 when the lease was live and is now returned; 0 when it had
--          expired (its entry, if still there, is removed anyway) or was
--          already reclaimed.
--
-- Removing the last member deletes the key, so nothing is left behind.
local score = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not score then
  return 0
end
redis.call('ZREM', KEYS[1], ARGV[1])
if tonumber(score) <= NOW_MS then
  return 0
end
return 1
