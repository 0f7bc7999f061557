-- Read the throttled reports of the processes in the index (src/throttled/publish.rs).
--
-- KEYS[1..n]  the reports (strings)
-- ARGV        none
-- Reply       each report, or nil where it expired meanwhile
return redis.call('MGET', unpack(KEYS))
