-- The server's clock, read once, before anything else: prepended to every
-- script that needs the time, so every script reads it the same way and
-- no client clock is ever trusted.
--   NOW_US  microseconds since the epoch
--   NOW_MS  whole milliseconds since the epoch
local CLOCK = redis.call('TIME')
local CLOCK_S, CLOCK_US = tonumber(CLOCK[1]), tonumber(CLOCK[2])
local NOW_US = CLOCK_S * 1000000 + CLOCK_US
local NOW_MS = CLOCK_S * 1000 + math.floor(CLOCK_US / 1000)
