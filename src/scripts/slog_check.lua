-- Rate-limit check of ONE sliding-log limit: the generic check
-- (limit_prelude.lua, sliding_log.lua, limit_main.lua) specialised, with
-- the same KEYS, decisions and writes (ARGV and Reply: see one_limit.lua),
-- and less work for Redis. It is what a limiter with one sliding-log limit
-- sends; a multi-limit sends the generic check. That the two agree on
-- every input is tested side by side (tests/cluster/one_limit_checks.rs).
--
-- KEYS, ARGV, Reply: as one_limit.lua, which comes before this part and
--       reads the override and block (KEYS[1] is the state key: a sorted
--       set, one member per admitted unit scored by its admission time in
--       us, see sliding_log.lua; the period is whole ms);
--       one_limit_end.lua comes after it and writes.
-- Server time only; nothing is written unless the request is admitted, and
-- every number written is checked to be an integer in [0, 2^53) before the
-- first write (anything else raises: nothing is written).

-- sliding_log.lua, for a cost above the capacity (only an override makes
-- it so) with the capacity in its place, then denied for good.
local never = COST > LIMIT
local cost = never and LIMIT or COST
local horizon = NOW_US - PERIOD
if horizon % 1 ~= 0 or horizon < 0 or horizon >= 9007199254740992 then
  return redis.error_reply('ERR shardlimit: number out of range: ' .. tostring(horizon))
end
local after_horizon = '(' .. string.format('%d', horizon)
local used = redis.call('ZCOUNT', KEY, after_horizon, '+inf')
local newest = -1
if used > 0 then
  newest = tonumber(redis.call('ZRANGE', KEY, -1, -1, 'WITHSCORES')[2])
end
-- Scores are unique and increasing per key, so members never collide even
-- if two calls see the same microsecond.
SLOG_STAMP, SLOG_COUNT, SLOG_HORIZON = math.max(NOW_US, newest + 1), cost, horizon
WRITE_AT_MS = math.ceil((SLOG_STAMP + PERIOD) / 1000)
ADMITS = used + cost <= LIMIT and not never
RETRY = -1
if not ADMITS and not never then
  -- The (used + cost - limit)-th oldest live entry must leave the window.
  local nth = redis.call('ZRANGEBYSCORE', KEY, after_horizon, '+inf',
    'WITHSCORES', 'LIMIT', used + cost - LIMIT - 1, 1)
  RETRY = tonumber(nth[2]) + PERIOD - NOW_US
end
CAPACITY = LIMIT
WRITES = ADMITS and COUNTS
if WRITES then
  REMAINING, RESET = LIMIT - used - cost, SLOG_STAMP + PERIOD - NOW_US
else
  REMAINING, RESET = LIMIT - used, used > 0 and (newest + PERIOD - NOW_US) or 0
end
if ADMITS then
  -- more_us (see limit_prelude.lua): when the oldest live entry leaves.
  if used > 0 then
    local oldest = redis.call('ZRANGEBYSCORE', KEY, after_horizon, '+inf', 'WITHSCORES', 'LIMIT', 0, 1)
    RETRY = tonumber(oldest[2]) + PERIOD - NOW_US
  else
    RETRY = RESET
  end
end
