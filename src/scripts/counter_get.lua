-- Read a counter and its remaining TTL.
--
-- KEYS[1]  the counter key
--
-- ARGV     none
--
-- Reply    {value as a bulk string, pttl in ms} when the key exists (pttl -1
--          would mean it has no TTL); an empty array when it does not.
local value = redis.call('GET', KEYS[1])
if not value then
  return {}
end
return {value, redis.call('PTTL', KEYS[1])}
