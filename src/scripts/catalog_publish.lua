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
-- Everything is decided from one read before the first write, and the TTL
-- is set right after the field: a command refused halfway (an ACL without
-- HGETALL or HDEL) never leaves the key without a TTL.
local key, spec, before = KEYS[1], ARGV[1], ARGV[2]
local ttl, most = tonumber(ARGV[3]), tonumber(ARGV[4])
local fields = redis.call('HGETALL', key)
local kept, drop = { { spec, NOW_MS } }, {}
if before ~= '' and before ~= spec then
  drop[#drop + 1] = before
end
for i = 1, #fields, 2 do
  local field, at = fields[i], tonumber(fields[i + 1])
  if field ~= spec and field ~= before then
    if at == nil or at < NOW_MS - ttl then
      drop[#drop + 1] = field
    else
      kept[#kept + 1] = { field, at }
    end
  end
end
if #kept > most then
  -- Newest first: this spec (just published) always stays.
  table.sort(kept, function(a, b) return a[2] > b[2] end)
  for i = most + 1, #kept do
    drop[#drop + 1] = kept[i][1]
  end
end
redis.call('HSET', key, spec, string.format('%d', NOW_MS))
redis.call('PEXPIRE', key, ttl)
for _, field in ipairs(drop) do
  redis.call('HDEL', key, field)
end
return math.min(#kept, most)
