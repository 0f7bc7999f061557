-- The processes whose throttled report has not expired (src/throttled/publish.rs).
--
-- KEYS[1]  the index (a sorted set: process id, scored by when its report
--          expires, server milliseconds)
-- ARGV     none
-- Reply    the process ids, at most 1000
return redis.call('ZRANGEBYSCORE', KEYS[1], NOW_MS, '+inf', 'LIMIT', 0, 1000)
