-- Sliding window counter: cheap, approximate sliding window.
--
-- KEYS: one hash {w = window index, c = units in window w, p = units in
--       window w-1}; expires when window w+1 ends.
-- ARGV: limit = units per period; period (us, whole ms); burst unused.
-- Reply (per limit, see limit_prelude.lua).
-- The estimate is c + p * (1 - elapsed fraction of the current window): the
-- previous window's traffic is assumed evenly spread. Exact when it was; in
-- the worst case (all of the previous window's traffic at its very end) up to
-- 2x the limit can pass within one period, the fixed window's bound.

-- The units counted in window w and in window w - 1, as the key holds them
-- (a key of an older window holds neither).
local function swc_counts(key, w)
  local stored = redis.call('HMGET', key, 'w', 'c', 'p')
  local sw = tonumber(stored[1])
  if sw == w then
    return tonumber(stored[2]) or 0, tonumber(stored[3]) or 0
  elseif sw == w - 1 then
    return 0, tonumber(stored[2]) or 0
  end
  return 0, 0
end

-- When a request of `cost` units could be admitted, with `cur` and `prev`
-- counted in the windows starting at `start` and before it.
local function swc_wait(start, period, limit, cur, prev, cost)
  local room = limit - cur - cost
  if room >= 0 and prev > 0 then
    -- Later in this window, once enough of prev's weight has decayed.
    return math.ceil(start + (1 - room / prev) * period - NOW_US)
  end
  -- In the next window, where this window's count becomes prev.
  local f = 0
  if cur > 0 then
    f = math.max(0, 1 - (limit - cost) / cur)
  end
  return math.ceil(start + period + f * period - NOW_US)
end

-- When more than `left` units are free (0: all are).
local function swc_more(start, period, limit, cur, prev, left)
  if left >= limit then
    return 0
  end
  return swc_wait(start, period, limit, cur, prev, math.max(left, 0) + 1)
end

ALGOS.swc = function(key, limit, period, _burst, cost)
  local w = math.floor(NOW_US / period)
  local start = w * period
  local fraction = (NOW_US - start) / period
  local cur, prev = swc_counts(key, w)
  local estimate = cur + prev * (1 - fraction)
  local ok = estimate + cost <= limit
  local retry, more_now, more_after = -1, false, false
  if not ok then
    retry = swc_wait(start, period, limit, cur, prev, cost)
  else
    more_now = swc_more(start, period, limit, cur, prev, math.floor(limit - estimate))
    more_after = swc_more(start, period, limit, cur + cost, prev, math.floor(limit - estimate - cost))
  end
  local reset_now = 0
  if cur > 0 then
    reset_now = start + 2 * period - NOW_US
  elseif prev > 0 then
    reset_now = start + period - NOW_US
  end
  return state(
    ok,
    math.floor(limit - estimate),
    math.floor(limit - estimate - cost),
    retry,
    reset_now,
    start + 2 * period - NOW_US,
    {
      { 'HSET', key, 'w', int(w), 'c', int(cur + cost), 'p', int(prev) },
      { 'PEXPIREAT', key, int((start + 2 * period) / 1000) },
    },
    more_now,
    more_after)
end
