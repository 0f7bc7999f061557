-- GCRA (generic cell rate algorithm): token / leaky bucket in one number.
--
-- KEYS: one key holding the theoretical arrival time (TAT, us); it expires
--       when the TAT is reached, i.e. when the bucket is full again and the
--       state is no longer needed.
-- ARGV: limit and period set the rate (one unit per period/limit us); burst =
--       capacity (the most units admitted at once from a full bucket).
-- Reply (per limit, see limit_prelude.lua), the meaning of redis-cell's
--       CL.THROTTLE: limited = not allowed, limit = burst, remaining,
--       retry_after, reset_after (until the bucket is full).
-- The TAT is stored rounded up to a whole microsecond (never over-admits);
-- `remaining` allows for that rounding with 1 us of slack.
-- Bounds (checked by the client): tolerance = burst * period / limit is at
-- most 366 days, so the TAT stays within NOW_US + 2 tolerances and the key's
-- TTL within one.

ALGOS.gcra = function(key, limit, period, burst, cost)
  local interval = period / limit
  local tolerance = interval * burst
  local tat = math.max(tonumber(redis.call('GET', key) or 0), NOW_US)
  local new_tat = tat + cost * interval
  local allow_at = new_tat - tolerance
  local ok = allow_at <= NOW_US
  local stored = math.ceil(new_tat)
  return state(
    ok,
    math.min(burst, math.floor((NOW_US + tolerance - tat + 1) / interval)),
    math.min(burst, math.floor((NOW_US + tolerance - new_tat + 1) / interval)),
    ok and -1 or math.ceil(allow_at - NOW_US),
    math.ceil(tat - NOW_US),
    math.ceil(new_tat - NOW_US),
    { { 'SET', key, int(stored), 'PXAT', int(math.ceil(stored / 1000)) } })
end
