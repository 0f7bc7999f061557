-- The server's clock, read once, before anything else: prepended to every
-- script that needs the time, so every script reads it the same way and
-- no client clock is ever trusted.
--   NOW_US  microseconds since the epoch
--   NOW_MS  whole milliseconds since the epoch
local CLOCK = redis.call('TIME')
-- Read by arithmetic, which converts a numeric string as tonumber does, at
-- under half the cost: tonumber (Lua 5.1's) is a function call that parses
-- the string twice (lua_isnumber, then lua_tonumber: strtod each time).
local CLOCK_S, CLOCK_US = CLOCK[1] + 0, CLOCK[2] + 0
local NOW_US = CLOCK_S * 1000000 + CLOCK_US
local NOW_MS = CLOCK_S * 1000 + math.floor(CLOCK_US / 1000)
