-- Sliding window counter: cheap, approximate sliding window.
--
-- The one place its decision is written in Lua (see gcra.lua's header for
-- how the scripts are assembled from it, and src/limit/algorithm.rs for
-- what each function must do).
--
-- KEYS: one hash {w = window index, c = units in window w, p = units in
--       window w-1}; expires when window w+1 ends.
-- ARGV: limit = units per period; period (us, whole ms); burst unused.
-- Reply: the estimate's remaining; reset_after = until both windows'
--       units have left.
-- The estimate is c + p * (1 - elapsed fraction of the current window): the
-- previous window's traffic is assumed evenly spread. Exact when it was; in
-- the worst case (all of the previous window's traffic at its very end) up to
-- 2x the limit can pass within one period, the fixed window's bound.

-- The units counted in window w and in window w - 1, as the key holds them
-- (a key of an older window holds neither).
local function counts_in(key, w)
  local stored = redis.call('HMGET', key, 'w', 'c', 'p')
  local sw = tonumber(stored[1])
  if sw == w then
    return tonumber(stored[2]) or 0, tonumber(stored[3]) or 0
  elseif sw == w - 1 then
    return 0, tonumber(stored[2]) or 0
  end
  return 0, 0
end

-- When a request of `want` units could be admitted, with `cur` and `prev`
-- counted in the windows starting at `start` and before it.
local function wait_for(start, period, limit, cur, prev, want)
  local room = limit - cur - want
  if room >= 0 and prev > 0 then
    -- Later in this window, once enough of prev's weight has decayed.
    return math.ceil(start + (1 - room / prev) * period - NOW_US)
  end
  -- In the next window, where this window's count becomes prev.
  local f = 0
  if cur > 0 then
    f = math.max(0, 1 - (limit - want) / cur)
  end
  return math.ceil(start + period + f * period - NOW_US)
end

local function decide(key, _value, limit, period, _burst, cost, counts)
  local w = math.floor(NOW_US / period)
  local start = w * period
  local cur, prev = counts_in(key, w)
  local estimate = cur + prev * (1 - (NOW_US - start) / period)
  local window_end = start + 2 * period
  local c, at_ms = cur + cost, window_end / 1000
  -- Integers in [0, 2^53) (x % 1 is NaN for an infinite x or not a number).
  if w % 1 ~= 0 or w < 0 or w >= MAX_EXACT then
    out_of_range(w)
  end
  if c % 1 ~= 0 or c < 0 or c >= MAX_EXACT then
    out_of_range(c)
  end
  if prev % 1 ~= 0 or prev < 0 or prev >= MAX_EXACT then
    out_of_range(prev)
  end
  if at_ms % 1 ~= 0 or at_ms < 0 or at_ms >= MAX_EXACT then
    out_of_range(at_ms)
  end
  local remaining, reset
  if estimate + cost > limit or not counts then
    remaining, reset = math.floor(limit - estimate), 0
    if cur > 0 then
      reset = window_end - NOW_US
    elseif prev > 0 then
      reset = start + period - NOW_US
    end
    if estimate + cost > limit then
      return false, wait_for(start, period, limit, cur, prev, cost), remaining, reset
    end
  else
    remaining, reset, cur = math.floor(limit - estimate - cost), window_end - NOW_US, c
    redis.call('HSET', key, 'w', string.format('%d', w), 'c', string.format('%d', c),
      'p', string.format('%d', prev))
    redis.call('PEXPIREAT', key, string.format('%d', at_ms))
  end
  -- When more than `remaining` units are free (0: all are).
  local want, more = math.max(remaining, 0) + 1, 0
  if want <= limit then
    more = wait_for(start, period, limit, cur, prev, want)
  end
  return true, more, remaining, reset
end

-- [adjust]: penalize and reward (limit_adjust.lua), GCRA's slices; the
-- checks are assembled without what follows (src/limit/algorithm/assemble.rs).
local function adjust(key, limit, period, _burst, delta)
  local w = math.floor(NOW_US / period)
  local cur, prev = counts_in(key, w)
  if delta >= 0 then
    cur = math.min(cur + delta, limit)
  else
    -- Give back this window's units first, then the previous window's.
    local back = math.min(cur, -delta)
    cur = cur - back
    prev = math.max(prev - (-delta - back), 0)
  end
  if cur == 0 and prev == 0 then
    redis.call('DEL', key)
    return true
  end
  redis.call('HSET', key, 'w', int(w), 'c', int(cur), 'p', int(prev))
  redis.call('PEXPIREAT', key, int((w + 2) * period / 1000))
  return true
end
