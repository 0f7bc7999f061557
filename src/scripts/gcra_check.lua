-- Rate-limit check of ONE GCRA limit: the generic check (limit_prelude.lua,
-- gcra.lua, limit_main.lua) specialised, with the same KEYS,
-- decisions and writes (ARGV and Reply: see one_limit.lua), and a third
-- less work for Redis. It is what
-- a limiter with one GCRA limit (the default) sends; a multi-limit sends
-- the generic check. That the two agree on every input is tested side by
-- side (tests/cluster/one_limit_checks.rs).
--
-- KEYS, ARGV, Reply: as one_limit.lua, which comes before this part and
--       reads the keys and the override (KEYS[1] is the state key);
--       one_limit_end.lua comes after it.
-- Server time only; nothing is written unless the request is admitted, and
-- every number written is checked to be an integer in [0, 2^53) before the
-- write (a corrupt state raises: nothing is written).
-- gcra.lua, for a cost above the capacity (only an override makes it so)
-- with the capacity in its place, then denied for good.
local never = COST > BURST
local cost = never and BURST or COST
local interval = PERIOD / LIMIT
local tat = tonumber(VALUE or 0)
if tat < NOW_US then
  tat = NOW_US
end
-- The units free now decide and are reported (see gcra.lua).
local free = BURST - math.ceil((tat - NOW_US) * LIMIT / PERIOD)
local new_tat = tat + cost * interval
-- An integer (ceil) unless infinite or not a number: x % 1 is then NaN.
WRITE = math.ceil(new_tat)
if WRITE % 1 ~= 0 or WRITE < 0 or WRITE >= 9007199254740992 then
  return redis.error_reply('ERR shardlimit: number out of range: ' .. tostring(WRITE))
end
ADMITS = cost <= free and not never
RETRY = -1
if not ADMITS and not never then
  -- At least 1 us: the float may round a denial's wait to 0.
  RETRY = math.ceil(new_tat - interval * BURST - NOW_US)
  if RETRY < 1 then
    RETRY = 1
  end
end
CAPACITY = BURST
WRITES = ADMITS and COUNTS
-- remaining and reset_after: the generic check's, from the TAT in force
-- after this request.
if WRITES then
  tat, WRITE_AT_MS = new_tat, math.ceil(WRITE / 1000)
  free = free - cost
end
REMAINING = free
RESET = math.ceil(tat - NOW_US)
if ADMITS then
  -- more_us (see limit_prelude.lua): when the TAT holds one unit fewer
  -- (0: it holds none), at least 1 us as above.
  local held = BURST - free
  RETRY = 0
  if held > 0 then
    RETRY = math.ceil(tat - NOW_US - (held - 1) * interval)
    if RETRY < 1 then
      RETRY = 1
    end
  end
end
