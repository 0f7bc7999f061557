-- Rate-limit check of ONE limit, of the algorithm whose file comes before
-- this one (src/limit/algorithm/<name>/<name>.lua: its BURSTS, decide and
-- write): what a limiter with one limit sends; a multi-limit sends the
-- generic check (limit_prelude.lua, every algorithm's file, limit_main.lua).
-- The two share each algorithm's decision and apply the same rules to it;
-- this one is straight-line code: no table or function is made per call
-- but the reply, numbers are parsed once, and defaults are not sent (every
-- such step costs Redis; see docs/performance.md). That the two agree on
-- every input is tested side by side (tests/cluster/one_limit_checks.rs).
--
-- KEYS  as the generic check for one limit: KEYS[1] the state key, KEYS[2]
--       the override key, KEYS[3] the block key; inline mode: KEYS[1] alone.
-- ARGV  limit, period_us, burst, then cost (absent: 1), mode (1 | 0 |
--       i1 | i0; absent: 1), shadow (absent: 0): the generic check's for
--       one limit without the algorithm's code (the script is the
--       algorithm's own); inline mode (all six given) adds the override's
--       value and the block's value ('' = none), both left out when there
--       are none (then the three defaults may be left out too, and mode 1
--       or 0 is i1 or i0: the one key says it is inline).
-- Reply when neither an override nor a block exists: { verdict, remaining,
--       retry_after_us, reset_after_us }, with verdict = 2 * all_allowed +
--       allowed (the capacity is the quota's, the flags 0, settled_ms -1);
--       otherwise the generic check's { all_allowed, allowed, remaining,
--       retry_after_us, reset_after_us, capacity, flags, settled_ms,
--       override_limit, override_period_us }: see limit_prelude.lua.
-- Server time only; nothing is written unless the request is admitted, and
-- every number written is checked to be an integer in [0, 2^53) before the
-- write (anything else raises: nothing is written).

local MODE = ARGV[5] or '1'
local KEY = KEYS[1]
local VALUE, OVERRIDE, BLOCK
-- How long the override and block stay as they are: -1 no bound, -2 not
-- known (inline mode with either present), else the smaller PTTL of those
-- that exist (read only when one does: a plain check pays nothing for it).
local SETTLED = -1
-- A key of another type (the sliding window counter's hash state among
-- them, which its part reads itself) is read as absent, where GET would
-- refuse it (WRONGTYPE): a string state is written only if it is absent
-- (NX) when it was read as absent, and refused otherwise, so a key of
-- another type is never replaced (see gcra.lua).
if not KEYS[2] then
  OVERRIDE, BLOCK = ARGV[7], ARGV[8]
  if OVERRIDE or BLOCK then
    -- Given ('' = none), as the three-key check reads them (false = none).
    OVERRIDE, BLOCK = OVERRIDE ~= '' and OVERRIDE, BLOCK ~= '' and BLOCK
    if OVERRIDE or BLOCK then
      SETTLED = -2
    end
  end
  -- One key: a GET, whose WRONGTYPE pcall returns as a table (read as
  -- absent; any other refusal, an ACL's, stays the check's), costs less
  -- than an MGET, whose reply is a table every time; a state of another
  -- kind is not read here at all.
  if STRING_STATE then
    VALUE = redis.pcall('GET', KEY)
    if VALUE and VALUE.err then
      if not string.find(VALUE.err, '^WRONGTYPE') then
        error(VALUE)
      end
      VALUE = false
    end
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

-- Numbers are read by arithmetic, not tonumber, which parses a string
-- twice (strtod each time) and is a function call: see clock.lua.
local COST = ARGV[4]
COST = (COST == nil or COST == '1') and 1 or COST + 0
local LIMIT, PERIOD, BURST = ARGV[1] + 0, ARGV[2] + 0, ARGV[3] + 0
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
-- An admission is written: the mode consumes and no block holds.
local COUNTS = (MODE == '1' or MODE == 'i1') and not BLOCK_WAIT

-- The decision, for a cost above the capacity (only an override makes it
-- so) with the capacity in its place, then denied for good.
local CAPACITY = BURSTS and BURST or LIMIT
local never = COST > CAPACITY
-- An admission that counts is written by decide itself.
local ok, retry, remaining, reset =
  decide(NOW_US, KEY, VALUE, LIMIT, PERIOD, BURST, never and CAPACITY or COST, COUNTS and not never)
if never then
  ok, retry = false, -1
end

-- Blocked: denied until the block ends, or later if the limit itself would
-- still deny then (never stays never).
local flags = FLAGS
if BLOCK_WAIT then
  if ok or (retry >= 0 and BLOCK_WAIT > retry) then
    retry = BLOCK_WAIT
  end
  ok = false
  flags = flags + 1
end
-- Shadow mode refuses nothing.
local all_ok = ok or ARGV[6] == '1'
if remaining > CAPACITY then
  remaining = CAPACITY
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
  all_ok and 1 or 0, ok and 1 or 0, remaining, retry, reset, CAPACITY, flags,
  SETTLED, APPLIED_LIMIT, APPLIED_PERIOD,
}
