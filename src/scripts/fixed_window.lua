-- Fixed window (clock-aligned, like Sidekiq's "bucket" limiter).
--
-- KEYS: one integer key, the units admitted in the current window; it
--       expires at the window's end (PXAT), so it never outlives its window.
-- ARGV: limit = units per window; period = window length (us, whole ms);
--       burst unused.
-- Reply (per limit, see limit_prelude.lua): remaining = limit - used;
--       retry_after = until the window ends; reset_after = same, 0 if unused.
-- Windows start at multiples of the period since the Unix epoch, so every
-- subject's windows line up. Up to 2x the limit can pass in a short span
-- around a boundary (the end of one window and the start of the next).

ALGOS.fw = function(key, limit, period, _burst, cost)
  local window_start = math.floor(NOW_US / period) * period
  local window_end = window_start + period
  local used = tonumber(redis.call('GET', key) or 0)
  -- A key of this window expires at its end. One that expires earlier (or
  -- never) is an earlier window's, still visible because Redis expires keys
  -- by the time the script started while TIME moves on (and PXAT keeps a key
  -- alive through its expiry millisecond, the next window's first): its
  -- count does not belong to this window. Checked whatever the millisecond.
  if used > 0 and redis.call('PEXPIRETIME', key) < window_end / 1000 then
    used = 0
  end
  local ok = used + cost <= limit
  local until_end = window_end - NOW_US
  return state(
    ok,
    limit - used,
    limit - used - cost,
    ok and -1 or until_end,
    used > 0 and until_end or 0,
    until_end,
    { { 'SET', key, int(used + cost), 'PXAT', int(window_end / 1000) } })
end
