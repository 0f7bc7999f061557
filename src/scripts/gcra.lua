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
-- The TAT is stored rounded up to a whole microsecond (never over-admits).
-- One number decides and is reported: the units free now, burst less those
-- the TAT still holds (rounded up). The request is admitted if its cost
-- fits in them, and `remaining` is them (less the cost, once taken), so a
-- denial always says fewer are left than it asked for. With integer TAT and
-- time it is exact in the common case (no interval rounded in between).
-- Bounds (checked by the client): tolerance = burst * period / limit is at
-- most 366 days, so the TAT stays within NOW_US + 2 tolerances and the key's
-- TTL within one.

-- When more than `free` units (of `burst`, a request's cost having fit)
-- are free with the TAT `ahead` us ahead: when it holds one unit fewer (0 if
-- it holds none), at least 1 us.
local function gcra_more(ahead, free, interval, burst)
  local held = burst - free
  if held <= 0 then
    return 0
  end
  return math.max(1, math.ceil(ahead - (held - 1) * interval))
end

ALGOS.gcra = function(key, limit, period, burst, cost)
  local interval = period / limit
  local tat = math.max(tonumber(redis.call('GET', key) or 0), NOW_US)
  local free = burst - math.ceil((tat - NOW_US) * limit / period)
  local new_tat = tat + cost * interval
  local ok = cost <= free
  local stored = math.ceil(new_tat)
  return state(
    ok,
    free,
    free - cost,
    -- At least 1 us: the float below may round a denial's wait to 0.
    ok and -1 or math.max(1, math.ceil(new_tat - interval * burst - NOW_US)),
    math.ceil(tat - NOW_US),
    math.ceil(new_tat - NOW_US),
    { { 'SET', key, int(stored), 'PXAT', int(math.ceil(stored / 1000)) } },
    ok and gcra_more(tat - NOW_US, free, interval, burst),
    ok and gcra_more(new_tat - NOW_US, free - cost, interval, burst))
end
