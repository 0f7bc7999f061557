-- GCRA (generic cell rate algorithm): a token / leaky bucket in one number.
--
-- The one place its decision is written in Lua: every script that decides
-- for GCRA (the one-limit check, the multi-limit check, the adjustments,
-- the quota slices) is assembled from this file (src/scripts.rs), and
-- mod.rs beside it is its Rust side, tested against it on random sequences
-- (tests/cluster/algorithms.rs). What each function must do is the
-- interface every algorithm's file gives: see src/limit/algorithm.rs.
--
-- KEYS: one key holding the theoretical arrival time (TAT, us); it expires
--       when the TAT is reached, i.e. when the bucket is full again and the
--       state is no longer needed.
-- ARGV: limit and period set the rate (one unit per period/limit us, the
--       emission interval); burst = capacity (the most units admitted at
--       once from a full bucket).
-- Reply: the meaning of redis-cell's CL.THROTTLE: limited = not allowed,
--       limit = burst, remaining, retry_after, reset_after (until the
--       bucket is full).
-- The TAT is stored rounded up to a whole microsecond (never over-admits).
-- One number decides and is reported: the units free now, burst less those
-- the TAT still holds (rounded up). The request is admitted if its cost
-- fits in them, and `remaining` is them (less the cost, once taken), so a
-- denial always says fewer are left than it asked for. With integer TAT and
-- time it is exact in the common case (no interval rounded in between).
-- Bounds (checked by the client): the tolerance, burst * period / limit,
-- is at most 366 days, so the TAT stays within NOW_US + 2 tolerances and
-- the key's TTL within one.

local function decide(now, key, value, limit, period, burst, cost, counts)
  local interval = period / limit
  -- By arithmetic, not tonumber: half the cost (see clock.lua).
  local tat, free = (value or 0) + 0, burst
  -- A TAT not ahead of now holds nothing (the common case: no ceil).
  if tat <= now then
    tat = now
  else
    free = burst - math.ceil((tat - now) * limit / period)
  end
  local new_tat = tat + cost * interval
  -- An integer (ceil) unless infinite or not a number: x % 1 is then NaN.
  local stored = math.ceil(new_tat)
  if stored % 1 ~= 0 or stored < 0 or stored >= 9007199254740992 then
    error({ err = 'ERR shardlimit: number out of range: ' .. tostring(stored) })
  end
  if cost > free then
    -- At least 1 us: the float may round a denial's wait to 0.
    local wait = math.ceil(new_tat - interval * burst - now)
    if wait < 1 then
      wait = 1
    end
    return false, wait, free, math.ceil(tat - now)
  end
  if counts then
    tat, free = new_tat, free - cost
    -- Read as absent by an MGET (which reads a key of another type as
    -- absent where GET would refuse it), it is written only if still
    -- absent: a key of another type is refused, never replaced.
    local at_ms = string.format('%d', math.ceil(stored / 1000))
    if value then
      redis.call('SET', key, string.format('%d', stored), 'PXAT', at_ms)
    elseif not redis.call('SET', key, string.format('%d', stored), 'PXAT', at_ms, 'NX') then
      error({ err = 'WRONGTYPE Operation against a key holding the wrong kind of value: ' .. key })
    end
  end
  -- When the TAT holds one unit fewer (0: it holds none), at least 1 us:
  -- with one held, that is the reset (the common case: one ceil fewer).
  local reset = math.ceil(tat - now)
  local held, more = burst - free, 0
  if held == 1 then
    more = reset
  elseif held > 1 then
    more = math.ceil(tat - now - (held - 1) * interval)
  end
  if held > 0 and more < 1 then
    more = 1
  end
  return true, more, free, reset
end

-- [adjust]: penalize and reward (limit_adjust.lua), GCRA's slices; the
-- checks are assembled without what follows (src/limit/algorithm/assemble.rs).

-- The TAT `tat` (us, not before `now`) with `units` given back at `limit`
-- per `period`, rounded up as it is stored: never past a full bucket (a
-- TAT of `now`). A reward; the slices' give-back, which writes it with
-- the take of the same call (slice.lua).
local function given_back(now, tat, limit, period, units)
  return math.max(math.ceil(tat - units * (period / limit)), now)
end

local function adjust(key, limit, period, burst, delta)
  local interval = period / limit
  local tat = math.max(tonumber(redis.call('GET', key) or 0), NOW_US)
  local new_tat
  if delta >= 0 then
    -- Never past an empty bucket (a TAT a tolerance ahead), nor back.
    new_tat = math.min(tat + delta * interval, math.max(tat, NOW_US + interval * burst))
  else
    new_tat = given_back(NOW_US, tat, limit, period, -delta)
  end
  if new_tat <= NOW_US then
    redis.call('DEL', key)
    return true
  end
  local stored = math.ceil(new_tat)
  redis.call('SET', key, int(stored), 'PXAT', int(math.ceil(stored / 1000)))
  return true
end
