-- Read a counter and reset it to 0, keeping its TTL (GETSET would
-- silently drop the TTL and make abandoned counters immortal).
--
-- KEYS[1]  the counter key (an integer string with an idle TTL)
--
-- ARGV     none
--
-- Reply    the value read, as a bulk string (exact for any 64-bit integer,
--          which Lua numbers are not); nil when the key does not exist —
--          then nothing is written, so a drain can never create a key
--          without a TTL.
local value = redis.call('GET', KEYS[1])
if not value then
  return false
end
if not string.match(value, '^%-?%d+$') then
  return redis.error_reply('ERR counter ' .. KEYS[1] .. ' does not hold an integer')
end
-- KEEPTTL: overwrite the value, keep the expiry the adds set.
redis.call('SET', KEYS[1], '0', 'KEEPTTL')
return value
