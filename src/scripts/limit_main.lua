-- Rate-limit check, driver (see limit_prelude.lua for KEYS, ARGV and Reply).

local cost = tonumber(ARGV[1])
local states = {}
local all_ok = true
for i = 1, #KEYS / LIMIT_KEYS do
  local a = 3 + SPEC_ARGS * (i - 1)
  local key = KEYS[LIMIT_KEYS * (i - 1) + 1]
  local code = ARGV[a]
  local check = ALGOS[code]
  if not check then
    return redis.error_reply('ERR shardlimit: unknown algorithm ' .. tostring(code))
  end
  local limit, period, burst = tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2]), tonumber(ARGV[a + 3])
  local flags = 0
  local ol, op, ob
  -- How long this limit's override and block stay as they are (see
  -- settled_ms in limit_prelude.lua).
  local settled = -1
  if INLINE then
    ol, op, ob = parse_override(ARGV[a + 5], key .. ':quota')
    if ARGV[a + 5] ~= '' or ARGV[a + 6] ~= '' then
      settled = -2
    end
  else
    local okey = KEYS[3 * i - 1]
    local o = redis.call('GET', okey)
    ol, op, ob = parse_override(o, okey)
    if o then
      settled = earliest(settled, okey)
    end
  end
  local applied_limit, applied_period = 0, 0
  if ol then
    limit, period, burst, flags = ol, op, ob, 2
    applied_limit, applied_period = ol, op
  end
  local capacity = limit
  if code == 'gcra' then
    capacity = burst
  end
  local s
  if cost > capacity then
    -- Only an override can make the capacity smaller than the cost: what a
    -- request of the whole capacity would see, but denied for good.
    s = check(key, limit, period, burst, capacity)
    s.ok, s.retry = false, -1
  else
    s = check(key, limit, period, burst, cost)
  end
  local until_us
  if INLINE then
    until_us = parse_block(ARGV[a + 6])
  else
    local b = redis.call('GET', KEYS[3 * i])
    until_us = parse_block(b)
    if b then
      settled = earliest(settled, KEYS[3 * i])
    end
  end
  if until_us > NOW_US then
    -- Blocked: denied until the block ends, or later if the limit itself
    -- would still deny then (never stays never).
    local wait = until_us - NOW_US
    if s.ok then
      s.retry = wait
    elseif s.retry >= 0 then
      s.retry = math.max(s.retry, wait)
    end
    s.ok = false
    flags = flags + 1
  end
  s.capacity, s.flags, s.settled = capacity, flags, settled
  s.applied_limit, s.applied_period = applied_limit, applied_period
  s.shadow = ARGV[a + 4] == '1'
  states[i] = s
  all_ok = all_ok and (s.ok or s.shadow)
end

-- Only now, with every decision made and every write formatted, write.
local consumed = all_ok and CONSUME
local reply = { all_ok and 1 or 0 }
for i = 1, #states do
  local s = states[i]
  local wrote = consumed and s.ok
  if wrote then
    for _, command in ipairs(s.writes) do
      redis.call(unpack(command))
    end
  end
  reply[#reply + 1] = s.ok and 1 or 0
  reply[#reply + 1] = wrote and s.remaining_after or s.remaining_now
  reply[#reply + 1] = s.ok and (wrote and s.more_after or s.more_now) or s.retry
  reply[#reply + 1] = wrote and s.reset_after or s.reset_now
  reply[#reply + 1] = s.capacity
  reply[#reply + 1] = s.flags
  reply[#reply + 1] = s.settled
  reply[#reply + 1] = s.applied_limit
  reply[#reply + 1] = s.applied_period
end
return reply
