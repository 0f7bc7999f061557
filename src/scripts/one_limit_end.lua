-- The end of the one-limit checks (after one_limit.lua and the algorithm's
-- part): limit_main.lua's rules for one limit, then the write and the reply.
--
-- KEYS, ARGV, Reply: as one_limit.lua.
-- Reads, as the algorithm's part sets them:
--   ADMITS, RETRY  the limit's own verdict, and when the same request could
--                  next be admitted (-1: never); if admitted, more_us
--                  (see limit_prelude.lua), after this request if WRITES
--   CAPACITY       the most one request may cost
--   WRITE, WRITE_AT_MS  a string state's new value and its expiry (PXAT;
--                  needed, so maybe set, only if WRITES);
--                  a hash state (swc) sets SWC_W, SWC_C, SWC_P too; a
--                  sorted set (slog) SLOG_STAMP, SLOG_COUNT (members to add,
--                  scored SLOG_STAMP) and SLOG_HORIZON (trimmed up to)
--   WRITES         the state is written: ADMITS and COUNTS (one_limit.lua)
--   REMAINING, RESET  remaining and reset_after_us after this request:
--                  with its units counted if WRITES, else without
-- Every number written was checked to be an integer in [0, 2^53) by the
-- algorithm's part, before anything is written.

local ok, retry, flags = ADMITS, RETRY, FLAGS
if BLOCK_WAIT then
  if ok or (retry >= 0 and BLOCK_WAIT > retry) then
    retry = BLOCK_WAIT
  end
  ok = false
  flags = flags + 1
end
-- Shadow mode refuses nothing.
local all_ok = ok or ARGV[6] == '1'
if WRITES then
  if SLOG_STAMP then
    -- sliding_log.lua's writes: trim what left the window, add one member
    -- per unit (at most 128: the limit's cap), expire with the newest.
    if SLOG_STAMP % 1 ~= 0 or SLOG_STAMP < 0 or SLOG_STAMP >= 9007199254740992
      or WRITE_AT_MS >= 9007199254740992 then
      return redis.error_reply('ERR shardlimit: number out of range: ' .. tostring(SLOG_STAMP))
    end
    local stamp = string.format('%d', SLOG_STAMP)
    redis.call('ZREMRANGEBYSCORE', KEY, '-inf', string.format('%d', SLOG_HORIZON))
    if SLOG_COUNT == 1 then
      redis.call('ZADD', KEY, stamp, stamp .. ':1')
    else
      local add = {}
      for i = 1, SLOG_COUNT do
        add[2 * i - 1], add[2 * i] = stamp, stamp .. ':' .. i
      end
      redis.call('ZADD', KEY, unpack(add))
    end
    redis.call('PEXPIREAT', KEY, string.format('%d', WRITE_AT_MS))
  elseif SWC_W then
    redis.call('HSET', KEY, 'w', string.format('%d', SWC_W), 'c', string.format('%d', SWC_C),
      'p', string.format('%d', SWC_P))
    redis.call('PEXPIREAT', KEY, string.format('%d', WRITE_AT_MS))
  elseif VALUE then
    redis.call('SET', KEY, string.format('%d', WRITE), 'PXAT', string.format('%d', WRITE_AT_MS))
  elseif not redis.call('SET', KEY, string.format('%d', WRITE), 'PXAT', string.format('%d', WRITE_AT_MS), 'NX') then
    -- Read as absent by MGET, yet there: a key of another type.
    return redis.error_reply('WRONGTYPE Operation against a key holding the wrong kind of value: ' .. KEY)
  end
end
local remaining, reset = REMAINING, RESET
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
