-- Rate-limit check of ONE fixed-window limit: the generic check
-- (limit_prelude.lua, fixed_window.lua, limit_main.lua) specialised, with
-- the same KEYS, decisions and writes (ARGV and Reply: see one_limit.lua),
-- and a third less work for Redis. It is what a limiter with one fixed-window limit sends; a
-- multi-limit sends the generic check. That the two agree on every input is
-- tested side by side (tests/cluster/one_limit_checks.rs).
--
-- KEYS, ARGV, Reply: as one_limit.lua, which comes before this part and
--       reads the keys and the override (KEYS[1] is the state key: the units
--       admitted in the current window; the period is whole ms).
-- Server time only; nothing is written unless the request is admitted, and
-- every number written is checked to be an integer in [0, 2^53) before the
-- write (anything else raises: nothing is written).
-- fixed_window.lua, for a cost above the capacity (only an override makes
-- it so) with the capacity in its place, then denied for good.
local never = COST > LIMIT
local cost = never and LIMIT or COST
local window_start = math.floor(NOW_US / PERIOD) * PERIOD
local window_end = window_start + PERIOD
local used = tonumber(VALUE or 0)
-- A count whose key expires before this window's end is an earlier
-- window's (see fixed_window.lua).
if used > 0 and redis.call('PEXPIRETIME', KEY) < window_end / 1000 then
  used = 0
end
WRITE, WRITE_AT_MS = used + cost, window_end / 1000
-- Integers in [0, 2^53) (x % 1 is NaN for an infinite x or not a number).
if WRITE % 1 ~= 0 or WRITE < 0 or WRITE >= 9007199254740992 then
  return redis.error_reply('ERR shardlimit: number out of range: ' .. tostring(WRITE))
end
if WRITE_AT_MS % 1 ~= 0 or WRITE_AT_MS < 0 or WRITE_AT_MS >= 9007199254740992 then
  return redis.error_reply('ERR shardlimit: number out of range: ' .. tostring(WRITE_AT_MS))
end
local until_end = window_end - NOW_US
ADMITS = WRITE <= LIMIT and not never
RETRY = (ADMITS or never) and -1 or until_end
CAPACITY = LIMIT
WRITES = ADMITS and COUNTS
if WRITES then
  REMAINING, RESET = LIMIT - WRITE, until_end
else
  REMAINING, RESET = LIMIT - used, used > 0 and until_end or 0
end
if ADMITS then
  -- more_us (see limit_prelude.lua): the window's end frees everything.
  RETRY = RESET
end
