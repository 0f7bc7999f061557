-- Rate-limit check of ONE GCRA limit: the generic check (limit_prelude.lua,
-- gcra.lua, limit_main.lua) specialised, with the same KEYS, ARGV, Reply,
-- decisions and writes, and about a quarter less work for Redis. It is what
-- a limiter with one GCRA limit (the default) sends; a multi-limit sends
-- the generic check. That the two agree on every input is tested side by
-- side (tests/one_limit_checks.rs).
--
-- KEYS, ARGV, Reply: as one_limit.lua, which comes before this part and
--       reads the keys and the override (KEYS[1] is the state key).
-- Server time only; nothing is written unless the request is admitted, and
-- every number written is checked to be an integer in [0, 2^53) before the
-- write (a corrupt state raises: nothing is written).

if ARGV[3] ~= 'gcra' then
  return redis.error_reply('ERR shardlimit: gcra_check runs gcra, not ' .. tostring(ARGV[3]))
end
-- gcra.lua, for a cost above the capacity (only an override makes it so)
-- with the capacity in its place, then denied for good.
local never = COST > BURST
local cost = never and BURST or COST
local interval = PERIOD / LIMIT
local tolerance = interval * BURST
local tat = tonumber(VALUE or 0)
if tat < NOW_US then
  tat = NOW_US
end
local new_tat = tat + cost * interval
local allow_at = new_tat - tolerance
local stored = math.ceil(new_tat)
exact(stored)
local admits = allow_at <= NOW_US and not never
local ok, retry, flags, all_ok, wrote =
  blocked(admits, (admits or never) and -1 or math.ceil(allow_at - NOW_US))

local after = tat
if wrote then
  redis.call('SET', KEY, string.format('%d', stored), 'PXAT', string.format('%d', math.ceil(stored / 1000)))
  after = new_tat
end
-- remaining and reset_after: the generic check's, from the TAT in force
-- after this request.
local remaining = math.floor((NOW_US + tolerance - after + 1) / interval)
if remaining > BURST then
  remaining = BURST
end
return reply(all_ok, ok, remaining, retry, math.ceil(after - NOW_US), BURST, flags)
