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

local function decide(now, key, _value, limit, period, _burst, cost, counts)
  local w = math.floor(now / period)
  local start = w * period
  -- The units counted in window w and in window w - 1, as the key holds
  -- them (a key of an older window holds neither).
  local stored = redis.call('HMGET', key, 'w', 'c', 'p')
  local sw, cur, prev = tonumber(stored[1]), 0, 0
  if sw == w then
    cur, prev = tonumber(stored[2]) or 0, tonumber(stored[3]) or 0
  elseif sw == w - 1 then
    prev = tonumber(stored[2]) or 0
  end
  local estimate = cur + prev * (1 - (now - start) / period)
  local window_end = start + 2 * period
  local c, at_ms = cur + cost, window_end / 1000
  -- Integers in [0, 2^53) (x % 1 is NaN for an infinite x or not a number).
  local bad = (w % 1 ~= 0 or w < 0 or w >= 9007199254740992) and w
    or (c % 1 ~= 0 or c < 0 or c >= 9007199254740992) and c
    or (prev % 1 ~= 0 or prev < 0 or prev >= 9007199254740992) and prev
    or (at_ms % 1 ~= 0 or at_ms < 0 or at_ms >= 9007199254740992) and at_ms
  if bad then
    error({ err = 'ERR shardlimit: number out of range: ' .. tostring(bad) })
  end
  local admits = estimate + cost <= limit
  local remaining, reset, want = math.floor(limit - estimate), 0, cost
  if admits and counts then
    remaining, reset, cur = math.floor(limit - estimate - cost), window_end - now, c
    redis.call('HSET', key, 'w', string.format('%d', w), 'c', string.format('%d', c),
      'p', string.format('%d', prev))
    redis.call('PEXPIREAT', key, string.format('%d', at_ms))
  elseif cur > 0 then
    reset = window_end - now
  elseif prev > 0 then
    reset = start + period - now
  end
  if admits then
    -- When more than `remaining` units are free (0: all are).
    want = math.max(remaining, 0) + 1
    if want > limit then
      return true, 0, remaining, reset
    end
  end
  -- When a request of `want` units could be admitted: later in this
  -- window, once enough of prev's weight has decayed, or in the next one,
  -- where this window's count becomes prev.
  local room, wait = limit - cur - want
  if room >= 0 and prev > 0 then
    wait = math.ceil(start + (1 - room / prev) * period - now)
  else
    local f = 0
    if cur > 0 then
      f = math.max(0, 1 - (limit - want) / cur)
    end
    wait = math.ceil(start + period + f * period - now)
  end
  return admits, wait, remaining, reset
end

-- [adjust]: penalize and reward (limit_adjust.lua), GCRA's slices; the
-- checks are assembled without what follows (src/limit/algorithm/assemble.rs).
local function adjust(key, limit, period, _burst, delta)
  local w = math.floor(NOW_US / period)
  local stored = redis.call('HMGET', key, 'w', 'c', 'p')
  local sw, cur, prev = tonumber(stored[1]), 0, 0
  if sw == w then
    cur, prev = tonumber(stored[2]) or 0, tonumber(stored[3]) or 0
  elseif sw == w - 1 then
    prev = tonumber(stored[2]) or 0
  end
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
