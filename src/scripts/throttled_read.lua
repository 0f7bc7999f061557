-- Read the throttled reports of the processes in the index (src/throttled/publish.rs).
-- GET per key rather than MGET: the least-privilege ACL (docs/production.md)
-- allows GET.
--
-- KEYS[1..n]  the reports (strings)
-- ARGV        none
-- Reply       each report, or nil where it expired meanwhile
local reports = {}
for i, key in ipairs(KEYS) do
  reports[i] = redis.call('GET', key)
end
return reports
