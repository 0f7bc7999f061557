-- Extend a lock, only if it is still held with our token.
--
-- KEYS[1]  the lock key
-- KEYS[2]  the fence key
-- ARGV[1]  our token
-- ARGV[2]  new lock ttl in milliseconds, counted from now (>= 1)
-- ARGV[3]  the least remaining ttl the fence key must keep, in milliseconds
--
-- Reply    1 when extended; 0 when the lock expired or another holder has it
--          (nothing is changed then).
--
-- The fence key's ttl is only ever raised, so it outlives the lock it
-- fences; it is never created here (a missing fence key is covered by the
-- server time in the next acquisition's token).
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
local fence_pttl = redis.call('PTTL', KEYS[2])
if fence_pttl >= 0 and fence_pttl < tonumber(ARGV[3]) then
  redis.call('PEXPIRE', KEYS[2], ARGV[3])
end
return 1
