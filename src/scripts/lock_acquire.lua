-- Acquire a lock and issue its fencing token, atomically.
--
-- KEYS[1]  the lock key: holds the holder's random token, PX = lock ttl
-- KEYS[2]  the fence key: the last fencing token issued for the resource
-- ARGV[1]  the new holder's token (128 random bits, hex)
-- ARGV[2]  lock ttl in milliseconds (>= 1)
-- ARGV[3]  fence key ttl in milliseconds (>= ARGV[2])
-- ARGV[4]  only when KEYS holds the lock key alone (while the resource's
--          slot migrates, see src/lock.rs): the fence key's value, read by
--          the client just before ('' = none); the script then does not
--          write the fence key, and the client raises it afterwards
--          (lock_fence.lua)
--
-- Reply    {1, fencing_token} when acquired;
--          {0, pttl of the current holder} when held elsewhere (a retry hint).
--
-- The fencing token is max(previous + 1, server time in microseconds). The
-- previous value makes tokens strictly increase even within one microsecond;
-- the server time makes them keep increasing after the fence key expired
-- (it has a TTL like every key we write) or was lost in a failover, as long
-- as the masters' clocks do not step back by more than the fence key's
-- lifetime. Time comes from the server, never from a client.
if not redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return {0, redis.call('PTTL', KEYS[1])}
end
local alone = #KEYS == 1
local previous
if alone then
  previous = tonumber(ARGV[4]) or 0
else
  previous = tonumber(redis.call('GET', KEYS[2]) or '0') or 0
end
local fence = math.max(previous + 1, NOW_US)
if not alone then
  -- %.0f: an integer below 2^53 printed exactly, never in exponent form.
  redis.call('SET', KEYS[2], string.format('%.0f', fence), 'PX', ARGV[3])
end
return {1, fence}
