-- Rate-limit check of ONE sliding-window-counter limit: the generic check
-- (limit_prelude.lua, sliding_window.lua, limit_main.lua) specialised, with
-- the same KEYS, decisions and writes (ARGV and Reply: see one_limit.lua),
-- and less work for Redis.
-- It is what a limiter with one sliding-window-counter limit sends; a
-- multi-limit sends the generic check. That the two agree on every input is
-- tested side by side (tests/cluster/one_limit_checks.rs).
--
-- KEYS, ARGV, Reply: as one_limit.lua, which comes before this part and
--       reads the override and block (KEYS[1] is the state key: a hash
--       {w, c, p}, see sliding_window.lua; the period is whole ms).
-- Server time only; nothing is written unless the request is admitted, and
-- every number written is checked to be an integer in [0, 2^53) before the
-- write (anything else raises: nothing is written).
-- sliding_window.lua, for a cost above the capacity (only an override makes
-- it so) with the capacity in its place, then denied for good.
local never = COST > LIMIT
local cost = never and LIMIT or COST
local w = math.floor(NOW_US / PERIOD)
local start = w * PERIOD
local fraction = (NOW_US - start) / PERIOD
-- The units counted in window w and in window w - 1, as the key holds them
-- (a key of an older window holds neither).
local stored = redis.call('HMGET', KEY, 'w', 'c', 'p')
local sw = tonumber(stored[1])
local cur, prev = 0, 0
if sw == w then
  cur, prev = tonumber(stored[2]) or 0, tonumber(stored[3]) or 0
elseif sw == w - 1 then
  prev = tonumber(stored[2]) or 0
end
local estimate = cur + prev * (1 - fraction)
local window_end = start + 2 * PERIOD
SWC_W, SWC_C, SWC_P, WRITE_AT_MS = w, cur + cost, prev, window_end / 1000
-- Integers in [0, 2^53) (x % 1 is NaN for an infinite x or not a number).
if SWC_W % 1 ~= 0 or SWC_W < 0 or SWC_W >= 9007199254740992 then
  return redis.error_reply('ERR shardlimit: number out of range: ' .. tostring(SWC_W))
end
if SWC_C % 1 ~= 0 or SWC_C < 0 or SWC_C >= 9007199254740992 then
  return redis.error_reply('ERR shardlimit: number out of range: ' .. tostring(SWC_C))
end
if SWC_P % 1 ~= 0 or SWC_P < 0 or SWC_P >= 9007199254740992 then
  return redis.error_reply('ERR shardlimit: number out of range: ' .. tostring(SWC_P))
end
if WRITE_AT_MS % 1 ~= 0 or WRITE_AT_MS < 0 or WRITE_AT_MS >= 9007199254740992 then
  return redis.error_reply('ERR shardlimit: number out of range: ' .. tostring(WRITE_AT_MS))
end
ADMITS = estimate + cost <= LIMIT and not never
CAPACITY = LIMIT
WRITES = ADMITS and COUNTS
if WRITES then
  REMAINING, RESET = math.floor(LIMIT - estimate - cost), window_end - NOW_US
else
  REMAINING, RESET = math.floor(LIMIT - estimate), 0
  if cur > 0 then
    RESET = window_end - NOW_US
  elseif prev > 0 then
    RESET = start + PERIOD - NOW_US
  end
end
-- The wait until a request of `want` units could be admitted: this one's
-- if denied; if admitted, more_us (see limit_prelude.lua), that of one unit
-- more than is left, counting this one's units if written (0: all free).
local want = cost
RETRY = -1
if ADMITS then
  want = math.max(REMAINING, 0) + 1
  if WRITES then
    cur = cur + cost
  end
  if want > LIMIT then
    want, RETRY = false, 0
  end
elseif never then
  want = false
end
if want then
  local room = LIMIT - cur - want
  if room >= 0 and prev > 0 then
    RETRY = start + (1 - room / prev) * PERIOD - NOW_US
  else
    local f = 0
    if cur > 0 then
      f = math.max(0, 1 - (LIMIT - want) / cur)
    end
    RETRY = start + PERIOD + f * PERIOD - NOW_US
  end
  RETRY = math.ceil(RETRY)
end
