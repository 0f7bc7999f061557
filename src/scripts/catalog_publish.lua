-- Publishes one limiter's spec to the catalog (src/limit/catalog.rs): one
-- string key per kind and name, in the catalog's one slot, holding the
-- specs processes publish, each with when (server time, ms) it was last
-- published: "<spec> <ms>,<spec> <ms>,...". A spec not published again
-- within the TTL is stale and dropped; the key expires a TTL after the last
-- publication of any. One read, then one SET with its TTL: a refused or
-- failed command never leaves the key without a TTL.
--
-- KEYS[1]  the catalog key, <ns>:{shardlimit.catalog}:catalog:<kind>:<name>
-- ARGV[1]  the spec: "limit period_us burst shadow" (shadow 0 or 1)
-- ARGV[2]  the spec this limiter published before it changed
--          (set_quota, set_shadow), dropped at once; "" when none
-- ARGV[3]  the TTL, ms: of the key, and the age at which a spec is stale
-- ARGV[4]  the most specs kept; the oldest beyond it are dropped
-- Reply    how many specs the key holds now
local key, spec, before = KEYS[1], ARGV[1], ARGV[2]
local ttl, most = tonumber(ARGV[3]), tonumber(ARGV[4])
local held = redis.call('GET', KEYS[1])
local kept = { { spec, NOW_MS } }
if held then
  for entry in string.gmatch(held, '[^,]+') do
    local field, at = string.match(entry, '^(.*) (%d+)$')
    at = tonumber(at)
    if field and field ~= spec and field ~= before and at >= NOW_MS - ttl then
      kept[#kept + 1] = { field, at }
    end
  end
end
-- Newest first: this spec, just published, always stays.
table.sort(kept, function(a, b) return a[2] > b[2] end)
local out = {}
for i = 1, math.min(#kept, most) do
  out[i] = kept[i][1] .. ' ' .. string.format('%d', kept[i][2])
end
redis.call('SET', key, table.concat(out, ','), 'PX', ttl)
return #out
