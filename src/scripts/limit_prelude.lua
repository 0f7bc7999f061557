-- Rate-limit check: one or more limits of one subject, atomically.
--
-- Every rate-limit script is this prelude, the algorithm files it needs
-- (fixed_window.lua, sliding_log.lua, sliding_window.lua, gcra.lua) and
-- limit_main.lua, concatenated. All KEYS share the subject's hash slot.
--
-- KEYS[i]   state key of limit i (i = 1..n), one key per limit
-- ARGV[1]   cost: units this request takes (1 <= cost <= every limit's capacity,
--           checked by the client)
-- ARGV[2]   1 = consume if every limit admits; 0 = peek (no writes at all)
-- ARGV[3 + 4(i-1) .. 6 + 4(i-1)]  limit i: algorithm code (fw | slog | swc |
--           gcra), limit, period in microseconds, burst (GCRA capacity; the
--           others ignore it)
--
-- Reply: { all_allowed, then per limit i: allowed, remaining, retry_after_us,
--          reset_after_us }
--   allowed        1 or 0
--   remaining      units left (after this request if it was consumed)
--   retry_after_us when this same request could next be admitted; -1 if it
--                  was admitted
--   reset_after_us when the limit is back to full (0 = already full)
-- Nothing is written unless every limit admits and ARGV[2] is 1: a rejected
-- request consumes nothing. Time is the server's (TIME), in microseconds.
--
-- Every decision, and every argument of every write, is computed before the
-- first write: a check that fails (an out-of-range number, a key of the
-- wrong type) fails before it has written anything, so a multi-limit check
-- is never half applied. The client bounds every quota so that no number
-- here leaves a double's exact integer range (2^53); int() re-checks every
-- number that is written, as a last line of defence.

local ALGOS = {}
local CONSUME = ARGV[2] == '1'

-- 2^53: above it a double no longer holds every integer.
local MAX_EXACT = 9007199254740992

-- Numbers near 1.8e15 (microseconds since 1970) lose digits in tostring();
-- format them as integers explicitly. Refuses (raises, so the script writes
-- nothing) anything that is not an integer in [0, 2^53): string.format('%d')
-- would silently wrap it, and a wrapped timestamp reads as "long ago".
local function int(x)
  if type(x) ~= 'number' or x ~= x or x < 0 or x >= MAX_EXACT or x ~= math.floor(x) then
    error({ err = 'ERR shardlimit: number out of range: ' .. tostring(x) })
  end
  return string.format('%d', x)
end

-- A state with `ok`, `remaining_now`, `remaining_after`, `retry`,
-- `reset_now`, `reset_after` and `writes`: the commands (argument lists,
-- fully formatted) to run on admission, so nothing is left to compute then.
local function state(ok, remaining_now, remaining_after, retry, reset_now, reset_after, writes)
  return {
    ok = ok,
    remaining_now = math.max(remaining_now, 0),
    remaining_after = math.max(remaining_after, 0),
    retry = retry,
    reset_now = math.max(reset_now, 0),
    reset_after = math.max(reset_after, 0),
    writes = writes,
  }
end
