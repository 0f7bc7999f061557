-- The shared part of the one-limit checks (gcra_check.lua, fw_check.lua,
-- swc_check.lua):
-- the generic check (limit_prelude.lua, limit_main.lua) for a single limit,
-- without the tables and functions it makes per call for any number of
-- limits. Straight-line code, concatenated before the algorithm's own part,
-- which reads the locals it sets.
--
-- KEYS  as the generic check for one limit: KEYS[1] the state key, KEYS[2]
--       the override key, KEYS[3] the block key; inline mode: KEYS[1] alone.
-- ARGV  as the generic check for one limit: cost, mode (1 | 0 | i1 | i0),
--       algorithm code, limit, period_us, burst, shadow; inline mode adds
--       the override's value and the block's value ('' = none).
-- Reply (made by reply()) { all_allowed, allowed, remaining,
--       retry_after_us, reset_after_us, capacity, flags, settled_ms,
--       override_limit, override_period_us }: see limit_prelude.lua.
-- Sets: MODE, KEY, VALUE (the state key's string, or false; not read for
-- swc), BLOCK (the
-- block's value), COST, LIMIT, PERIOD, BURST (the override's, if any),
-- FLAGS (2 if the override applied) and SETTLED (settled_ms); defines
-- exact(), blocked() and reply().

local MODE = ARGV[2]
local KEY = KEYS[1]
local VALUE, OVERRIDE, BLOCK
-- How long the override and block stay as they are: -1 no bound, -2 not
-- known (inline mode with either present), else the smaller PTTL of those
-- that exist (read only when one does: a plain check pays nothing for it).
local SETTLED = -1
-- The state is read here when it is a string (gcra, fw); swc's is a hash,
-- which its part reads itself.
local STRING_STATE = ARGV[3] ~= 'swc'
if MODE == 'i1' or MODE == 'i0' then
  VALUE, OVERRIDE, BLOCK = STRING_STATE and redis.call('GET', KEY), ARGV[8], ARGV[9]
  if OVERRIDE ~= '' or BLOCK ~= '' then
    SETTLED = -2
  end
else
  -- GET, not MGET: it refuses a state key of another type (WRONGTYPE)
  -- where MGET would read it as absent and the write replace it, and it is
  -- in every ACL the crate documents.
  VALUE, OVERRIDE, BLOCK = STRING_STATE and redis.call('GET', KEY), redis.call('GET', KEYS[2]), redis.call('GET', KEYS[3])
  if OVERRIDE then
    local ttl = redis.call('PTTL', KEYS[2])
    if ttl >= 0 then
      SETTLED = ttl
    end
  end
  if BLOCK then
    local ttl = redis.call('PTTL', KEYS[3])
    if ttl >= 0 and (SETTLED < 0 or ttl < SETTLED) then
      SETTLED = ttl
    end
  end
end

local COST = tonumber(ARGV[1])
local LIMIT, PERIOD, BURST = tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6])
local FLAGS = 0
-- The override's limit and period when it applied (else 0, 0): the reply's
-- override_limit and override_period_us.
local APPLIED_LIMIT, APPLIED_PERIOD = 0, 0
if OVERRIDE and OVERRIDE ~= '' then
  local l, p, b = string.match(OVERRIDE, '^(%d+) (%d+) (%d+)$')
  if not l then
    return redis.error_reply('ERR shardlimit: malformed override in ' .. KEY .. ':quota')
  end
  LIMIT, PERIOD, BURST, FLAGS = tonumber(l), tonumber(p), tonumber(b), 2
  APPLIED_LIMIT, APPLIED_PERIOD = LIMIT, PERIOD
end

-- int() of the generic check without the formatting (done only when the
-- number is written): refuses (raises, so nothing is written) anything
-- that is not an integer in [0, 2^53).
local function exact(x)
  if x ~= x or x < 0 or x >= 9007199254740992 or x ~= math.floor(x) then
    error({ err = 'ERR shardlimit: number out of range: ' .. tostring(x) })
  end
end

-- The limit's own verdict `ok` and `retry` (-1: admitted, or never) after
-- the block, the flags, whether the request is admitted (shadow mode
-- refuses nothing) and whether the state is to be written: limit_main.lua's
-- rules for one limit.
local function blocked(ok, retry)
  local flags = FLAGS
  local until_us = tonumber(BLOCK or 0) or 0
  if until_us > NOW_US then
    local wait = until_us - NOW_US
    if ok then
      retry = wait
    elseif retry >= 0 and wait > retry then
      retry = wait
    end
    ok = false
    flags = flags + 1
  end
  local all_ok = ok or ARGV[7] == '1'
  return ok, retry, flags, all_ok, ok and all_ok and (MODE == '1' or MODE == 'i1')
end

-- The reply (see limit_prelude.lua), `remaining` and `reset` clamped at 0
-- as the generic check's state() does.
local function reply(all_ok, ok, remaining, retry, reset, capacity, flags)
  if remaining < 0 then
    remaining = 0
  end
  if reset < 0 then
    reset = 0
  end
  return {
    all_ok and 1 or 0, ok and 1 or 0, remaining, retry, reset, capacity, flags,
    SETTLED, APPLIED_LIMIT, APPLIED_PERIOD,
  }
end
