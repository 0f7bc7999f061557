-- A fixed window's units given back by a check decided from plain commands
-- (src/limit/check/plain.rs) that denied, or that turned to the script
-- after counting: only while the state key holds them, in the window they
-- were counted in as far as the client knows it — its expiry within the
-- bounds given (the exact end of that window when the count gave the key
-- its expiry; from that end on when the key had one) — and never below
-- zero, so a give-back that comes late (to a key made again after a reset,
-- or to a later window) takes no more than the units it gives back.
--
-- KEYS: KEYS[1] the state key.
-- ARGV: units; the lowest and the highest expiry (ms) the key may have
--       (the highest 0: no bound).
-- Reply: the count after, or false when nothing was given back.

local key, units = KEYS[1], tonumber(ARGV[1])
local at, low, high = redis.call('PEXPIRETIME', key), tonumber(ARGV[2]), tonumber(ARGV[3])
if at < low or (high > 0 and at > high) then
  return false
end
if tonumber(redis.call('GET', key) or 0) < units then
  return false
end
return redis.call('DECRBY', key, units)
