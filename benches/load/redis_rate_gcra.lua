-- The shape and cost of go-redis/redis_rate's GCRA check (its `allowN`
-- script, lua.go, itself after rwz/redis-gcra), written here for
-- `--peers` (peers.rs) to drive with EVALSHA: not a copy, the same
-- commands and the same arithmetic. What makes it that shape, and not
-- minimal_gcra.lua's (integer microseconds, PX, no replicate_commands):
--   * redis.replicate_commands() first, as redis_rate calls it;
--   * the server's TIME as floating-point seconds since 2017-01-01 (the
--     offset keeps a double's precision), as redis_rate computes it;
--   * one GET of the theoretical arrival time (TAT, a float in seconds);
--   * the same float arithmetic: interval = period / rate, the increment
--     interval * cost, the burst's offset interval * burst;
--   * one SET of the new TAT (Lua converts the float) with EX, whole
--     seconds rounded up, when admitted;
--   * the same reply: allowed (the cost), remaining, and retry / reset
--     after as strings of floats.
-- KEYS[1] the subject's TAT
-- ARGV[1] burst, ARGV[2] rate (requests per period), ARGV[3] period
--         (seconds), ARGV[4] cost
redis.replicate_commands()

local key = KEYS[1]
local burst, rate, period = ARGV[1], ARGV[2], ARGV[3]
local cost = tonumber(ARGV[4])

local interval = period / rate
local increment = interval * cost
local offset = interval * burst

local clock = redis.call('TIME')
local since_2017 = 1483228800
local now = (clock[1] - since_2017) + (clock[2] / 1000000)

local tat = redis.call('GET', key)
tat = tat and tonumber(tat) or now
tat = math.max(tat, now)

local new_tat = tat + increment
local diff = now - (new_tat - offset)
local remaining = diff / interval

if remaining < 0 then
  return { 0, 0, tostring(-diff), tostring(tat - now) }
end

local reset_after = new_tat - now
if reset_after > 0 then
  redis.call('SET', key, new_tat, 'EX', math.ceil(reset_after))
end
return { cost, remaining, tostring(-1), tostring(reset_after) }
