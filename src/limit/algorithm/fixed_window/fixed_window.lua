-- Fixed window (clock-aligned, like Sidekiq's "bucket" limiter).
--
-- The one place its decision is written in Lua (see gcra.lua's header for
-- how the scripts are assembled from it, and src/limit/algorithm.rs for
-- what each function must do).
--
-- KEYS: one integer key, the units admitted in the current window; it
--       expires at the window's end (PXAT), so it never outlives its window.
-- ARGV: limit = units per window; period = window length (us, whole ms);
--       burst unused.
-- Reply: remaining = limit - used; retry_after = until the window ends;
--       reset_after = same, 0 if unused.
-- Windows start at multiples of the period since the Unix epoch, so every
-- subject's windows line up. Up to 2x the limit can pass in a short span
-- around a boundary (the end of one window and the start of the next).

local function decide(now, key, value, limit, period, _burst, cost, counts)
  local window_end = math.floor(now / period) * period + period
  -- By arithmetic, not tonumber: half the cost (see clock.lua).
  local used = (value or 0) + 0
  -- A key of this window expires at its end. One that expires earlier (or
  -- never) is an earlier window's, still visible because Redis expires keys
  -- by the time the script started while TIME moves on (and PXAT keeps a key
  -- alive through its expiry millisecond, the next window's first): its
  -- count does not belong to this window. Checked whatever the millisecond.
  if used > 0 and redis.call('PEXPIRETIME', key) < window_end / 1000 then
    used = 0
  end
  local after, at_ms = used + cost, window_end / 1000
  -- Integers in [0, 2^53) (x % 1 is NaN for an infinite x or not a number).
  local bad = (after % 1 ~= 0 or after < 0 or after >= 9007199254740992) and after
    or (at_ms % 1 ~= 0 or at_ms < 0 or at_ms >= 9007199254740992) and at_ms
  if bad then
    error({ err = 'ERR shardlimit: number out of range: ' .. tostring(bad) })
  end
  local until_end = window_end - now
  if after > limit then
    return false, until_end, limit - used, used > 0 and until_end or 0
  end
  if counts then
    -- Read as absent by an MGET, it is written only if still absent (see
    -- gcra.lua).
    if value then
      redis.call('SET', key, string.format('%d', after), 'PXAT', string.format('%d', at_ms))
    elseif not redis.call('SET', key, string.format('%d', after), 'PXAT', string.format('%d', at_ms), 'NX') then
      error({ err = 'WRONGTYPE Operation against a key holding the wrong kind of value: ' .. key })
    end
    -- The window's end frees everything.
    return true, until_end, limit - after, until_end
  end
  local reset = used > 0 and until_end or 0
  return true, reset, limit - used, reset
end

-- [adjust]: penalize and reward (limit_adjust.lua), GCRA's slices; the
-- checks are assembled without what follows (src/limit/algorithm/assemble.rs).
local function adjust(key, limit, period, _burst, delta)
  local window_end = math.floor(NOW_US / period) * period + period
  local used = tonumber(redis.call('GET', key) or 0)
  -- An earlier window's count (see decide).
  if used > 0 and redis.call('PEXPIRETIME', key) < window_end / 1000 then
    used = 0
  end
  local new = math.min(math.max(used + delta, 0), limit)
  if new == 0 then
    redis.call('DEL', key)
  else
    redis.call('SET', key, int(new), 'PXAT', int(window_end / 1000))
  end
  return true
end
