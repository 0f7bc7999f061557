-- The shared parts of the one-limit checks: this file reads, the
-- algorithm's part (gcra_check.lua, fw_check.lua, swc_check.lua,
-- slog_check.lua) decides,
-- one_limit_end.lua applies the block, the shadow mode and the mode,
-- writes and replies. Together they are the generic check (limit_prelude.lua,
-- limit_main.lua) for a single limit, as straight-line code: no table or
-- function is made per call but the reply, numbers are parsed once, and
-- defaults are not sent (every such step costs Redis; see
-- docs/performance.md).
--
-- KEYS  as the generic check for one limit: KEYS[1] the state key, KEYS[2]
--       the override key, KEYS[3] the block key; inline mode: KEYS[1] alone.
-- ARGV  limit, period_us, burst, then cost (absent: 1), mode (1 | 0 |
--       i1 | i0; absent: 1), shadow (absent: 0): the generic check's for
--       one limit without the algorithm's code (the script is the
--       algorithm's own); inline mode (all six given) adds the override's
--       value and the block's value ('' = none).
-- Reply (made by one_limit_end.lua) when neither an override nor a block
--       exists: { verdict, remaining, retry_after_us, reset_after_us }, with
--       verdict = 2 * all_allowed + allowed (the capacity is the quota's,
--       the flags 0, settled_ms -1); otherwise the generic check's
--       { all_allowed, allowed, remaining, retry_after_us, reset_after_us,
--       capacity, flags, settled_ms, override_limit, override_period_us }:
--       see limit_prelude.lua.
-- Sets: MODE, KEY, VALUE (the state key's value if it is a string, else
-- false), BLOCK_WAIT (how long the block in force still holds, us; false
-- if none), COUNTS (an admitted request is counted: the mode consumes and
-- no block holds), COST, LIMIT, PERIOD, BURST (the override's, if any),
-- FLAGS (2 if the override applied), SETTLED (settled_ms), APPLIED_LIMIT
-- and APPLIED_PERIOD; declares what the algorithm's part sets for
-- one_limit_end.lua (see there).

local MODE = ARGV[5] or '1'
local KEY = KEYS[1]
local VALUE, OVERRIDE, BLOCK
-- How long the override and block stay as they are: -1 no bound, -2 not
-- known (inline mode with either present), else the smaller PTTL of those
-- that exist (read only when one does: a plain check pays nothing for it).
local SETTLED = -1
-- MGET reads a key of another type (the sliding window counter's hash
-- state among them, which its part reads itself) as absent where GET would
-- refuse it (WRONGTYPE): one_limit_end.lua writes a string state only if it
-- is absent (NX) when it was read as absent, and refuses otherwise, so a
-- key of another type is never replaced.
if MODE == 'i1' or MODE == 'i0' then
  VALUE, OVERRIDE, BLOCK = redis.call('MGET', KEY)[1], ARGV[7], ARGV[8]
  if OVERRIDE ~= '' or BLOCK ~= '' then
    SETTLED = -2
  end
else
  -- One MGET for the three keys.
  local got = redis.call('MGET', KEY, KEYS[2], KEYS[3])
  VALUE, OVERRIDE, BLOCK = got[1], got[2], got[3]
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

local COST = ARGV[4]
COST = (COST == nil or COST == '1') and 1 or tonumber(COST)
local LIMIT, PERIOD, BURST = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
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

-- The block, decided before the algorithm's part so that it knows whether
-- an admitted request is written, and computes the remaining quota and
-- reset of only that outcome (each costs Redis; see docs/performance.md).
local BLOCK_WAIT = false
if BLOCK then
  local wait = (tonumber(BLOCK) or 0) - NOW_US
  if wait > 0 then
    BLOCK_WAIT = wait
  end
end
local COUNTS = (MODE == '1' or MODE == 'i1') and not BLOCK_WAIT

-- Set by the algorithm's part, read by one_limit_end.lua (see there).
local ADMITS, RETRY, CAPACITY, WRITE, WRITE_AT_MS, SWC_W, SWC_C, SWC_P
local SLOG_STAMP, SLOG_COUNT, SLOG_HORIZON, WRITES, REMAINING, RESET
