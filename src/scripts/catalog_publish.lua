-- Publishes one rate limiter's spec to the catalog (src/limit/catalog.rs):
-- a hash per kind and name, in the catalog's one slot, whose fields are the
-- specs processes publish and whose values say when (server time, ms) each
-- was last published. A field not published again within the TTL is stale
-- and dropped; the key expires a TTL after the last publication of any.
--
-- KEYS[1]  the catalog key, <ns>:{shardlimit.catalog}:catalog:<kind>:<name>
-- ARGV[1]  the spec: "limit period_us burst shadow" (shadow 0 or 1)
-- ARGV[2]  the spec this limiter published before it changed
--          (set_quota, set_shadow), dropped at once; "" when none
-- ARGV[3]  the TTL, ms: of the key, and the age at which a field is stale
-- ARGV[4]  the most fields kept; the oldest beyond it are dropped
-- Reply    how many specs the key holds now
local key, spec, before = KEYS[1], ARGV[1], ARGV[2]
local ttl, most = tonumber(ARGV[3]), tonumber(ARGV[4])
if before ~= '' and before ~= spec then
  redis.call('HDEL', key, before)
end
redis.call('HSET', key, spec, string.format('%d', NOW_MS))
local fields = redis.call('HGETALL', key)
local kept = {}
for i = 1, #fields, 2 do
  local at = tonumber(fields[i + 1])
  if at == nil or at < NOW_MS - ttl then
    redis.call('HDEL', key, fields[i])
  else
    kept[#kept + 1] = { fields[i], at }
  end
end
if #kept > most then
  table.sort(kept, function(a, b) return a[2] < b[2] end)
  for i = 1, #kept - most do
    redis.call('HDEL', key, kept[i][1])
  end
end
redis.call('PEXPIRE', key, ttl)
return math.min(#kept, most)
