-- Take one of at most N concurrent leases on a subject.
--
-- KEYS[1]  sorted set of live leases: member = lease id, score = the
--          lease's expiry in server milliseconds
-- ARGV[1]  the new lease id (128 random bits, hex)
-- ARGV[2]  N, the most leases held at once (>= 1)
-- ARGV[3]  lease ttl in milliseconds (>= 1)
--
-- Reply    {1, leases held now, lease ttl in ms} when granted;
--          {0, leases held now, ms until the soonest lease expires} when all N
--          are held (a retry hint: nothing was written).
--
-- Expired leases (of crashed or stalled processes) are reclaimed first. The
-- key's ttl is the longest live lease, so an idle subject leaves nothing.
-- Numbers are passed to commands as '%.0f' strings: Redis would otherwise
-- format them itself, possibly in exponent form, which PEXPIRE refuses.
local function int(n) return string.format('%.0f', n) end
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', int(NOW_MS))
local held = redis.call('ZCARD', KEYS[1])
if held >= tonumber(ARGV[2]) then
  local soonest = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
  return {0, held, tonumber(soonest[2]) - NOW_MS}
end
redis.call('ZADD', KEYS[1], int(NOW_MS + tonumber(ARGV[3])), ARGV[1])
local latest = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
redis.call('PEXPIRE', KEYS[1], int(tonumber(latest[2]) - NOW_MS))
return {1, held + 1, tonumber(ARGV[3])}
