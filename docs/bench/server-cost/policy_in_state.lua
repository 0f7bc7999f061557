-- An experiment, not the crate's layout: the one-limit GCRA check
-- (one_limit.lua, gcra_check.lua, one_limit_end.lua) with its locals
-- trimmed and the subject's override and block kept in the state key's
-- own value ("tat|limit period_us burst|keep_until_ms|blocked_until_us";
-- a bare number when the subject has neither), so that a check declares
-- and reads one key, as the minimal GCRA does. Counted with
--   SCRIPT_COST_VARIANTS=docs/bench/server-cost/policy_in_state.lua benches/script_cost.sh
-- on subjects with neither (the path every bench takes), to know what that
-- layout would save before designing it (docs/performance.md); the write
-- path of a subject with either is sketched only.
-- ARGS 1 {t}:f:RAND 1000000 1000000 1000000
local CLOCK = redis.call('TIME')
local NOW_US = tonumber(CLOCK[1]) * 1000000 + tonumber(CLOCK[2])
local MODE = ARGV[5] or '1'
local KEY = KEYS[1]
local SETTLED = -1
local VALUE = redis.call('GET', KEY)
local tat = tonumber(VALUE or 0)
local OVERRIDE, BLOCK, KEEP_MS
if not tat then
  local s, o, ou, b = string.match(VALUE, '^(%d+)|([%d ]*)|(%d*)|(%d*)$')
  tat, OVERRIDE, BLOCK, KEEP_MS = tonumber(s), o, b, tonumber(ou)
end
local COST = ARGV[4]
COST = (COST == nil or COST == '1') and 1 or tonumber(COST)
local LIMIT, PERIOD, BURST = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local FLAGS = 0
local APPLIED_LIMIT, APPLIED_PERIOD = 0, 0
if OVERRIDE and OVERRIDE ~= '' then
  local l, p, b = string.match(OVERRIDE, '^(%d+) (%d+) (%d+)$')
  if not l then
    return redis.error_reply('ERR shardlimit: malformed override in ' .. KEY .. ':quota')
  end
  LIMIT, PERIOD, BURST, FLAGS = tonumber(l), tonumber(p), tonumber(b), 2
  APPLIED_LIMIT, APPLIED_PERIOD = LIMIT, PERIOD
end
local never = COST > BURST
local cost = never and BURST or COST
local interval = PERIOD / LIMIT
local tolerance = interval * BURST
if tat < NOW_US then
  tat = NOW_US
end
local new_tat = tat + cost * interval
local allow_at = new_tat - tolerance
local ceil = math.ceil
local WRITE = ceil(new_tat)
if WRITE % 1 ~= 0 or WRITE < 0 or WRITE >= 9007199254740992 then
  return redis.error_reply('ERR shardlimit: number out of range: ' .. tostring(WRITE))
end
local ok = allow_at <= NOW_US and not never
local retry = (ok or never) and -1 or ceil(allow_at - NOW_US)
local flags = FLAGS
if BLOCK then
  local until_us = tonumber(BLOCK) or 0
  if until_us > NOW_US then
    local wait = until_us - NOW_US
    if ok or (retry >= 0 and wait > retry) then
      retry = wait
    end
    ok = false
    flags = flags + 1
  end
end
local all_ok = ok or ARGV[6] == '1'
local remaining, reset
if ok and (MODE == '1' or MODE == 'i1') then
  local format = string.format
  if VALUE then
    redis.call('SET', KEY, format('%d', WRITE), 'PXAT', format('%d', ceil(WRITE / 1000)))
  elseif not redis.call('SET', KEY, format('%d', WRITE), 'PXAT', format('%d', ceil(WRITE / 1000)), 'NX') then
    return redis.error_reply('WRONGTYPE Operation against a key holding the wrong kind of value: ' .. KEY)
  end
  tat = new_tat
end
remaining = math.floor((NOW_US + tolerance - tat + 1) / interval)
reset = ceil(tat - NOW_US)
if remaining > BURST then
  remaining = BURST
elseif remaining < 0 then
  remaining = 0
end
if reset < 0 then
  reset = 0
end
if flags == 0 and SETTLED == -1 then
  return { (all_ok and 2 or 0) + (ok and 1 or 0), remaining, retry, reset }
end
return {
  all_ok and 1 or 0, ok and 1 or 0, remaining, retry, reset, BURST, flags,
  SETTLED, APPLIED_LIMIT, APPLIED_PERIOD,
}
