-- The shared parts of the one-limit checks: this file reads, the
-- algorithm's part (gcra_check.lua, fw_check.lua, swc_check.lua) decides,
-- one_limit_end.lua applies the block, the shadow mode and the mode,
-- writes and replies. Together they are the generic check (limit_prelude.lua,
-- limit_main.lua) for a single limit, as straight-line code: no table or
-- function is made per call but the reply, and numbers are parsed once
-- (every such step costs Redis; see docs/performance.md).
--
-- KEYS  as the generic check for one limit: KEYS[1] the state key, KEYS[2]
--       the override key, KEYS[3] the block key; inline mode: KEYS[1] alone.
-- ARGV  as the generic check for one limit: cost, mode (1 | 0 | i1 | i0),
--       algorithm code, limit, period_us, burst, shadow; inline mode adds
--       the override's value and the block's value ('' = none).
-- Reply (made by one_limit_end.lua) when neither an override nor a block
--       exists: { verdict, remaining, retry_after_us, reset_after_us }, with
--       verdict = 2 * all_allowed + allowed (the capacity is the quota's,
--       the flags 0, settled_ms -1); otherwise the generic check's
--       { all_allowed, allowed, remaining, retry_after_us, reset_after_us,
--       capacity, flags, settled_ms, override_limit, override_period_us }:
--       see limit_prelude.lua.
-- Sets: MODE, KEY, VALUE (the state key's string, or false; not read for
-- swc), BLOCK (the block's value), COST, LIMIT, PERIOD, BURST (the
-- override's, if any), FLAGS (2 if the override applied), SETTLED
-- (settled_ms), APPLIED_LIMIT and APPLIED_PERIOD; the algorithm's part sets
-- what one_limit_end.lua reads (see there), declared here.

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
  -- One MGET for the three keys. It reads a state key of another type as
  -- absent where GET would refuse it (WRONGTYPE): one_limit_end.lua then
  -- writes the state only if it is absent (NX) and refuses otherwise, so a
  -- key of another type is never replaced.
  if STRING_STATE then
    local got = redis.call('MGET', KEY, KEYS[2], KEYS[3])
    VALUE, OVERRIDE, BLOCK = got[1], got[2], got[3]
  else
    local got = redis.call('MGET', KEYS[2], KEYS[3])
    OVERRIDE, BLOCK = got[1], got[2]
  end
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

local COST = ARGV[1] == '1' and 1 or tonumber(ARGV[1])
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

-- Set by the algorithm's part, read by one_limit_end.lua (see there).
local ADMITS, RETRY, CAPACITY, WRITE, WRITE_AT_MS, SWC_W, SWC_C, SWC_P
local REMAINING_WRITTEN, RESET_WRITTEN, REMAINING_KEPT, RESET_KEPT
