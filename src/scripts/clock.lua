-- The server's clock, read once, before anything else: prepended to every
-- script that needs the time, so every script reads it the same way and
-- no client clock is ever trusted.
--   NOW_US  microseconds since the epoch
--   NOW_MS  whole milliseconds since the epoch
local CLOCK = redis.call('TIME')
local NOW_US = tonumber(CLOCK[1]) * 1000000 + tonumber(CLOCK[2])
local NOW_MS = tonumber(CLOCK[1]) * 1000 + math.floor(tonumber(CLOCK[2]) / 1000)
