-- Rate-limit check, driver (see limit_prelude.lua for KEYS, ARGV and Reply).

local MODE = ARGV[2]
local CONSUME = MODE == '1' or MODE == 'i1'
local INLINE = MODE == 'i1' or MODE == 'i0'
-- Keys and ARGV fields per limit (after cost and mode).
local LIMIT_KEYS = INLINE and 1 or 3
local SPEC_ARGS = INLINE and 7 or 5

-- Numbers by arithmetic, not tonumber: half the cost (see clock.lua).
local cost = ARGV[1] + 0
local limits = {}
local all_ok = true
for i = 1, #KEYS / LIMIT_KEYS do
  local a = 3 + SPEC_ARGS * (i - 1)
  local key = KEYS[LIMIT_KEYS * (i - 1) + 1]
  local code = ARGV[a]
  local algo = ALGOS[code]
  if not algo then
    return redis.error_reply('ERR shardlimit: unknown algorithm ' .. tostring(code))
  end
  local limit, period, burst = ARGV[a + 1] + 0, ARGV[a + 2] + 0, ARGV[a + 3] + 0
  -- The override first (the quota decided under), and the block.
  local o, b, okey
  -- How long this limit's override and block stay as they are (see
  -- settled_ms in limit_prelude.lua).
  local settled = -1
  if INLINE then
    o, b, okey = ARGV[a + 5], ARGV[a + 6], key .. ':quota'
    if o ~= '' or b ~= '' then
      settled = -2
    end
  else
    okey = KEYS[3 * i - 1]
    o = redis.call('GET', okey)
    if o then
      settled = earliest(settled, okey)
    end
    b = redis.call('GET', KEYS[3 * i])
    if b then
      settled = earliest(settled, KEYS[3 * i])
    end
  end
  local flags = 0
  local applied_limit, applied_period = 0, 0
  local ol, op, ob = parse_override(o, okey)
  if ol then
    limit, period, burst, flags = ol, op, ob, 2
    applied_limit, applied_period = ol, op
  end
  local wait_block = parse_block(b) - NOW_US
  local capacity = algo.bursts and burst or limit
  -- Only an override can make the capacity smaller than the cost: what a
  -- request of the whole capacity would see, but denied for good.
  local never = cost > capacity
  local take = never and capacity or cost
  local value = algo.string_state and redis.call('GET', key)
  -- Decided without writing; written (decided again, counting) below once
  -- every limit admits.
  local ok, wait, remaining, reset = algo.decide(NOW_US, key, value, limit, period, burst, take, false)
  if never then
    ok, wait = false, -1
  end
  if wait_block > 0 then
    -- Blocked: denied until the block ends, or later if the limit itself
    -- would still deny then (never stays never).
    if ok or (wait >= 0 and wait_block > wait) then
      wait = wait_block
    end
    ok = false
    flags = flags + 1
  end
  local shadow = ARGV[a + 4] == '1'
  limits[i] = {
    decide = algo.decide, key = key, value = value, limit = limit, period = period, burst = burst,
    take = take, capacity = capacity, ok = ok, wait = wait, remaining = remaining, reset = reset,
    flags = flags, settled = settled, applied_limit = applied_limit,
    applied_period = applied_period,
  }
  all_ok = all_ok and (ok or shadow)
end

-- Only now, with every decision made and every number checked, write: each
-- limit that admitted takes the request, and reports what it leaves after.
local consumed = all_ok and CONSUME
local reply = { all_ok and 1 or 0 }
for i = 1, #limits do
  local l = limits[i]
  if l.ok and consumed then
    l.ok, l.wait, l.remaining, l.reset =
      l.decide(NOW_US, l.key, l.value, l.limit, l.period, l.burst, l.take, true)
  end
  reply[#reply + 1] = l.ok and 1 or 0
  reply[#reply + 1] = math.min(math.max(l.remaining, 0), l.capacity)
  reply[#reply + 1] = l.wait
  reply[#reply + 1] = math.max(l.reset, 0)
  reply[#reply + 1] = l.capacity
  reply[#reply + 1] = l.flags
  reply[#reply + 1] = l.settled
  reply[#reply + 1] = l.applied_limit
  reply[#reply + 1] = l.applied_period
end
return reply
