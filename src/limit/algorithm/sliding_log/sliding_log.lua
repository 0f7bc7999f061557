-- Sliding log: exact sliding window.
--
-- The one place its decision is written in Lua (see gcra.lua's header for
-- how the scripts are assembled from it, and src/limit/algorithm.rs for
-- what each function must do).
--
-- KEYS: one sorted set; one member per admitted unit, scored by admission
--       time (us). Entries older than the period are trimmed by every
--       admitted check (never by a denied one or a peek, which write
--       nothing); the key expires when its newest entry leaves the window.
-- ARGV: limit = units per sliding period; period (us, whole ms); burst unused.
-- Reply: retry_after = until enough of the oldest entries leave the window
--       for this cost to fit; reset_after = until the newest entry leaves it.
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

local function decide(now, key, _value, limit, period, _burst, cost, counts)
  local horizon = now - period
  -- Scores are unique and increasing per key, so members never collide even
  -- if two calls see the same microsecond: a new entry is stamped after the
  -- newest.
  local after, newest = '(' .. string.format('%d', horizon), -1
  local used = redis.call('ZCOUNT', key, after, '+inf')
  if used > 0 then
    newest = tonumber(redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')[2])
  end
  local stamp = math.max(now, newest + 1)
  local at_ms = math.ceil((stamp + period) / 1000)
  -- Integers in [0, 2^53) (x % 1 is NaN for an infinite x or not a number).
  local bad = (horizon % 1 ~= 0 or horizon < 0 or horizon >= 9007199254740992) and horizon
    or (stamp % 1 ~= 0 or stamp < 0 or stamp >= 9007199254740992) and stamp
    or at_ms >= 9007199254740992 and at_ms
  if bad then
    error({ err = 'ERR shardlimit: number out of range: ' .. tostring(bad) })
  end
  local remaining, reset = limit - used, used > 0 and (newest + period - now) or 0
  -- Denied: the (used + cost - limit)-th oldest live entry must leave the
  -- window. Admitted: when more than `remaining` units are free, when the
  -- oldest live entry (the new ones if none was) leaves it.
  local admits, nth = used + cost <= limit, used + cost - limit - 1
  if admits then
    nth = 0
  end
  -- Read before writing: an expiry already past by the server's clock
  -- (Redis 7.0 compares PEXPIREAT with the real time, not the script's:
  -- a master descheduled mid-script) deletes the key at once.
  local oldest = (used > 0 or not admits)
    and redis.call('ZRANGEBYSCORE', key, after, '+inf', 'WITHSCORES', 'LIMIT', nth, 1)
  if admits then
    if counts then
      remaining, reset = limit - used - cost, stamp + period - now
      -- Trim what left the window, add one member per unit (at most 128:
      -- the limit's cap, so one ZADD of up to 2 x 128 arguments, far under
      -- unpack()'s stack limit of 8000), expire with the newest.
      local s = string.format('%d', stamp)
      redis.call('ZREMRANGEBYSCORE', key, '-inf', string.format('%d', horizon))
      if cost == 1 then
        redis.call('ZADD', key, s, s .. ':1')
      else
        local add = {}
        for i = 1, cost do
          add[2 * i - 1], add[2 * i] = s, s .. ':' .. i
        end
        redis.call('ZADD', key, unpack(add))
      end
      redis.call('PEXPIREAT', key, string.format('%d', at_ms))
    end
    if used == 0 then
      return true, reset, remaining, reset
    end
  end
  return admits, tonumber(oldest[2]) + period - now, remaining, reset
end

-- [adjust]: penalize and reward (limit_adjust.lua), GCRA's slices; the
-- checks are assembled without what follows (src/limit/algorithm/assemble.rs).
local function adjust(key, limit, period, _burst, delta)
  local horizon = int(NOW_US - period)
  if delta < 0 then
    -- The newest entries go first; an emptied set is deleted by Redis.
    redis.call('ZREMRANGEBYSCORE', key, '-inf', horizon)
    redis.call('ZPOPMAX', key, int(-delta))
    return true
  end
  -- Counts `add` units as admitted, as a check of that cost would (never
  -- past the limit).
  local add = math.min(delta, limit - redis.call('ZCOUNT', key, '(' .. horizon, '+inf'))
  if add <= 0 then
    return false
  end
  decide(NOW_US, key, false, limit, period, 0, add, true)
  return true
end
