-- Publish one process's throttled report (src/throttled/publish.rs): its
-- report key, with a short TTL, and its entry in the index of reports, by
-- the server's clock; stale entries (their report expired) leave the index.
--
-- KEYS[1]  this process's report (a string)
-- KEYS[2]  the index (a sorted set: process id, scored by when its report
--          expires, server milliseconds)
-- ARGV[1]  the process id
-- ARGV[2]  the report (src/throttled/wire.rs)
-- ARGV[3]  the TTL, milliseconds
-- Reply    the number of processes in the index
local ttl = tonumber(ARGV[3])
redis.call('SET', KEYS[1], ARGV[2], 'PX', ttl)
redis.call('ZADD', KEYS[2], NOW_MS + ttl, ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', NOW_MS)
if redis.call('PTTL', KEYS[2]) < ttl then
  redis.call('PEXPIRE', KEYS[2], ttl)
end
return redis.call('ZCARD', KEYS[2])
