-- Sliding log: exact sliding window.
--
-- KEYS: one sorted set; one member per admitted unit, scored by admission
--       time (us). Entries older than the period are trimmed on every
--       consuming check; the key expires when its newest entry leaves the
--       window.
-- ARGV: limit = units per sliding period; period (us, whole ms); burst unused.
-- Reply (per limit, see limit_prelude.lua): retry_after = until enough of the
--       oldest entries leave the window for this cost to fit; reset_after =
--       until the newest entry leaves it.
-- Memory grows with the limit: up to `limit` members of ~20 bytes plus the
-- sorted set's per-entry overhead, per subject.

ALGOS.slog = function(key, limit, period, _burst, cost)
  local horizon = NOW - period
  local used
  if CONSUME then
    redis.call('ZREMRANGEBYSCORE', key, '-inf', int(horizon))
    used = redis.call('ZCARD', key)
  else
    used = redis.call('ZCOUNT', key, '(' .. int(horizon), '+inf')
  end
  local ok = used + cost <= limit
  local newest = -1
  if used > 0 then
    newest = tonumber(redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')[2])
  end
  -- Scores are unique and increasing per key, so members never collide even
  -- if two calls see the same microsecond.
  local stamp = math.max(NOW, newest + 1)
  local retry = -1
  if not ok then
    -- The (used + cost - limit)-th oldest live entry must leave the window.
    local nth = redis.call('ZRANGEBYSCORE', key, '(' .. int(horizon), '+inf',
      'WITHSCORES', 'LIMIT', used + cost - limit - 1, 1)
    retry = tonumber(nth[2]) + period - NOW
  end
  return state(
    ok,
    limit - used,
    limit - used - cost,
    retry,
    used > 0 and (newest + period - NOW) or 0,
    stamp + period - NOW,
    function()
      local s = int(stamp)
      local batch = {}
      for i = 1, cost do
        batch[#batch + 1] = s
        batch[#batch + 1] = s .. ':' .. i
        -- unpack() has a stack limit; add in chunks.
        if #batch >= 1000 or i == cost then
          redis.call('ZADD', key, unpack(batch))
          batch = {}
        end
      end
      redis.call('PEXPIREAT', key, int(math.ceil((stamp + period) / 1000)))
    end)
end
