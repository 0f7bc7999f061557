-- Sliding log: exact sliding window.
--
-- KEYS: one sorted set; one member per admitted unit, scored by admission
--       time (us). Entries older than the period are trimmed by every
--       admitted check (never by a denied one or a peek, which write
--       nothing); the key expires when its newest entry leaves the window.
-- ARGV: limit = units per sliding period; period (us, whole ms); burst unused.
-- Reply (per limit, see limit_prelude.lua): retry_after = until enough of the
--       oldest entries leave the window for this cost to fit; reset_after =
--       until the newest entry leaves it.
-- Bounds: the client caps the limit, and so the cost, at 128
-- (Algorithm::SLIDING_LOG_MAX_LIMIT): a key never holds more than `limit`
-- members, so it stays a compact listpack (Redis' default
-- zset-max-listpack-entries is 128; ~4 KB per subject), and the worst check
-- (trim 128 members, add 128) stays under a millisecond in SLOWLOG, as
-- tests/cluster/limits_bounds.rs measures (about 0.5 ms; 1000 members took 1.2-1.6
-- ms and 250 up to 1 ms on the loaded test host).
-- One member per unit rather than per request keeps `used` a ZCOUNT and the
-- retry time one ZRANGEBYSCORE ... LIMIT, both O(log n) in C; a member per
-- request carrying its cost would need Lua to sum the window's costs.

-- The writes that add `count` entries at `stamp`: trim what left the
-- window, one ZADD (of up to 2 x 128 arguments: far under unpack()'s stack
-- limit of 8000 thanks to the cap on the limit), expire with the newest.
local function slog_add(key, horizon, stamp, period, count)
  local s = int(stamp)
  local add = { 'ZADD', key }
  for i = 1, count do
    add[#add + 1] = s
    add[#add + 1] = s .. ':' .. i
  end
  return {
    { 'ZREMRANGEBYSCORE', key, '-inf', int(horizon) },
    add,
    { 'PEXPIREAT', key, int(math.ceil((stamp + period) / 1000)) },
  }
end

ALGOS.slog = function(key, limit, period, _burst, cost)
  local horizon = NOW_US - period
  local used = redis.call('ZCOUNT', key, '(' .. int(horizon), '+inf')
  local ok = used + cost <= limit
  local newest = -1
  if used > 0 then
    newest = tonumber(redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')[2])
  end
  -- Scores are unique and increasing per key, so members never collide even
  -- if two calls see the same microsecond.
  local stamp = math.max(NOW_US, newest + 1)
  local retry = -1
  if not ok then
    -- The (used + cost - limit)-th oldest live entry must leave the window.
    local nth = redis.call('ZRANGEBYSCORE', key, '(' .. int(horizon), '+inf',
      'WITHSCORES', 'LIMIT', used + cost - limit - 1, 1)
    retry = tonumber(nth[2]) + period - NOW_US
  end
  local writes = {}
  -- When more than the remaining quota is free: when the oldest live entry
  -- (after an admission: the new ones if none was) leaves the window.
  local more_now, more_after = 0, stamp + period - NOW_US
  if ok and CONSUME then
    writes = slog_add(key, horizon, stamp, period, cost)
  end
  if ok and used > 0 then
    local oldest = redis.call('ZRANGEBYSCORE', key, '(' .. int(horizon), '+inf',
      'WITHSCORES', 'LIMIT', 0, 1)
    more_now = tonumber(oldest[2]) + period - NOW_US
    more_after = more_now
  end
  return state(
    ok,
    limit - used,
    limit - used - cost,
    retry,
    used > 0 and (newest + period - NOW_US) or 0,
    stamp + period - NOW_US,
    writes,
    more_now,
    more_after)
end
