-- Rate-limit check: one or more limits of one subject, atomically.
--
-- The generic check is clock.lua, numbers.lua, this prelude, every
-- algorithm's file (src/limit/algorithm/<name>/<name>.lua), each in a block
-- of its own that files its functions under its code in ALGOS, and
-- limit_main.lua, concatenated (src/scripts.rs); limit_adjust.lua is
-- assembled the same way. All KEYS share the subject's hash slot.
--
-- KEYS[3i-2] state key of limit i (i = 1..n)
-- KEYS[3i-1] limit i's override for this subject: "limit period_us burst",
--            written by limit_adjust.lua (absent: the quota in ARGV)
-- KEYS[3i]   limit i's block for this subject: the server time (us) it is
--            blocked until, written by limit_adjust.lua (absent: not blocked)
-- ARGV[1]   cost: units this request takes (1 <= cost <= every limit's default
--           capacity, checked by the client; above an override's capacity the
--           request is denied, never admissible)
-- ARGV[2]   1 = consume if every limit admits; 0 = peek (no writes at all);
--           i1 / i0 = the same, "inline": see below
-- ARGV[3 + 5(i-1) .. 7 + 5(i-1)]  limit i: algorithm code (fw | slog | swc |
--           gcra), limit, period in microseconds, burst (GCRA capacity; the
--           others ignore it), shadow (1: its denial refuses nothing)
--
-- Inline mode (ARGV[2] = i1 or i0), for a slot under migration: KEYS holds
-- only the state keys (KEYS[i]: limit i's), and each limit's ARGV has two
-- more fields, ARGV[3 + 7(i-1) .. 9 + 7(i-1)] = the five above, then the
-- override's value ('' = none) and the block's value ('' = none), which the
-- client read on their own just before. While a slot migrates, Redis
-- refuses (TRYAGAIN) a multi-key script whose keys are not all on one side,
-- and the override and block keys almost never exist; a script on the
-- state key alone follows the slot's ASK redirect like any one-key command.
--
-- Reply: { all_allowed, then per limit i: allowed, remaining, retry_after_us,
--          reset_after_us, capacity, flags, settled_ms, override_limit,
--          override_period_us }
--   all_allowed    1 if every limit not in shadow mode admitted the request
--   allowed        1 or 0: this limit's own verdict (shadow or not)
--   remaining      units left (after this request if it was consumed)
--   retry_after_us if this limit denied: when this same request could next
--                  be admitted; -1 if it never can be (cost above an
--                  override's capacity). If it admitted: more_us, when
--                  more than `remaining` units are free (when a request
--                  of remaining + 1 units could be admitted; 0 when
--                  remaining is the capacity): the draft's `t`
--   reset_after_us when the limit is back to full (0 = already full)
--   capacity       the most one request may cost (the override's, if any)
--   flags          1 = blocked, 2 = an override applied (added)
--   settled_ms     how long the limit's override and block stay as they are
--                  unless changed by a call that announces it (their
--                  expiry is announced by no one): the smallest PTTL of
--                  the two that exist; -1 when neither exists (or neither
--                  expires); -2 when not known (inline mode with either
--                  present: their values were read on their own)
--   override_limit, override_period_us
--                  the override's limit and period when one applied (its
--                  burst is the capacity), else 0 and 0: the quota the
--                  decision was made under, for the HTTP headers
-- A limit's state is written only if the request is admitted (all_allowed),
-- ARGV[2] is 1 and the limit itself admitted it: a rejected request consumes
-- nothing, and a shadow limit that would deny it counts nothing. Time is the
-- server's (TIME), in microseconds.
--
-- retry_after_us is the earliest server time the same request could be
-- admitted if nothing but time changed (no reset, reward, unblock or override
-- change, and no override or block expiring: settled_ms): every algorithm's
-- admission only gets harder with a higher cost and with other requests'
-- writes, which is what lets a client cache a denial until the earlier of
-- the two (src/limit/stages/deny_cache.rs).
--
-- Every decision, and every argument of every write, is computed before the
-- first write: a check that fails (an out-of-range number, a key of the
-- wrong type) fails before it has written anything, so a multi-limit check
-- is never half applied. The client bounds every quota so that no number
-- here leaves a double's exact integer range (2^53); each algorithm's
-- decide re-checks every number it would write, as a last line of defence
-- (numbers.lua).

-- Every algorithm's functions, by its code in ARGV (fw | slog | swc | gcra):
-- { bursts, string_state, decide, adjust } (see src/limit/algorithm.rs;
-- adjust in limit_adjust.lua alone).
local ALGOS = {}

-- An override's value ("limit period_us burst", or false/'' for none) as
-- three numbers, or nil. A value that is not three integers (not written by
-- shardlimit) raises: nothing is written. `key` names it in the error.
local function parse_override(o, key)
  if not o or o == '' then
    return nil
  end
  local l, p, b = string.match(o, '^(%d+) (%d+) (%d+)$')
  if not l then
    error({ err = 'ERR shardlimit: malformed override in ' .. key })
  end
  return tonumber(l), tonumber(p), tonumber(b)
end

-- The server time (us) a block's value (false/'' for none) holds the
-- subject blocked until; 0 when none.
local function parse_block(v)
  return tonumber(v or 0) or 0
end


-- `settled` (see settled_ms in the reply above; -1: no bound) bounded by the expiry
-- of `key`, which exists. Called only for an override or block that
-- exists, so a check of a subject with neither pays nothing for it.
local function earliest(settled, key)
  local ttl = redis.call('PTTL', key)
  if ttl >= 0 and (settled < 0 or ttl < settled) then
    return ttl
  end
  return settled
end
