-- Quota slices of one GCRA limit of one subject: take a slice (consume N
-- cells now, decided later in the process that holds it) or return what a
-- slice did not use (give cells back, like a reward). Follows clock.lua.
-- All KEYS share the subject's hash slot.
--
-- KEYS[1]  the limit's state key for the subject (the GCRA's TAT, us)
-- KEYS[2]  the subject's override of the limit ("limit period_us burst")
-- KEYS[3]  the subject's block of the limit (server time blocked until, us)
-- KEYS[4]  the subject's outstanding slices: a sorted set of members
--          "<id>:<units>" scored by the server time (us) they expire at
-- ARGV[1]  op: take | return
-- ARGV[2]  take: the new slice's id; return: ignored
-- ARGV[3]  take: units wanted (>= 1); return: ignored
-- ARGV[4]  take: the request's cost (1 to wanted), which retry_us is for
-- ARGV[5]  take: the slice's lifetime on the server (us)
-- ARGV[6..8]  limit, period (us), burst: the limiter's default quota (an
--          override, if any, applies instead)
-- ARGV[9]  the declared bound, in parts per million of the limit: the
--          outstanding slices of the subject never sum past
--          floor(limit * ppm / 10^6) units
-- ARGV[10] a slice to give back first ('' = none): its member "<id>:<units>"
-- ARGV[11] how many of its units were not used (0 just frees its room)
-- ARGV[12] PUBLISH or SPUBLISH: how to tell every process that units came
--          back (deny caches forget the subject); '' = nobody
-- ARGV[13] the channel (in KEYS' slot, for SPUBLISH)
-- ARGV[14] the message: KEYS[4]
-- ARGV[15..16]  limit and period (us) of the quota ARGV[10]'s slice was
--          taken under ('' when none): what it gives back is priced as its
--          take charged it, whatever quota applies now
--
-- Reply: { granted, retry_us, limit, period_us, burst, overridden, spent }:
--   granted   units of the new slice (0: none; always 0 for return);
--   retry_us  when fewer than ARGV[4] cells are free: how long until a
--             request of ARGV[4] units could be admitted (-1 otherwise: the
--             bound or a block refused, or nothing did);
--   limit, period_us, burst  the quota applied; overridden 1 if the
--             subject's override applied, 2 if blocked (nothing granted);
--   spent     1 if the GCRA had fewer free cells than wanted: after this
--             take, none is free (for return: 0).
--
-- A returned slice gives back only while its member is still held (not
-- expired, not dropped by a reset), at most its units, each priced as its
-- take charged it, never past a full quota. A slice is refused (or shrunk) when the outstanding slices would
-- pass the bound or the GCRA has fewer free cells than wanted. Every key
-- written has a TTL: the state as a check writes it, the slices until the
-- last one expires. Numbers written are checked to be integers in [0, 2^53).

local STATE, SLICES = KEYS[1], KEYS[4]
local limit, period, burst = tonumber(ARGV[6]), tonumber(ARGV[7]), tonumber(ARGV[8])
local overridden = 0
local got = redis.call('MGET', KEYS[2], KEYS[3])
local override, block = got[1], got[2]
if override then
  local l, p, b = string.match(override, '^(%d+) (%d+) (%d+)$')
  if not l then
    return redis.error_reply('ERR shardlimit: malformed override in ' .. KEYS[2])
  end
  limit, period, burst = tonumber(l), tonumber(p), tonumber(b)
  overridden = 1
end
redis.call('ZREMRANGEBYSCORE', SLICES, '-inf', int(NOW_US))

-- Give back a slice first, if it is still held.
local returned = 0
if ARGV[10] ~= '' and redis.call('ZREM', SLICES, ARGV[10]) == 1 then
  local units = tonumber(string.match(ARGV[10], ':(%d+)$') or 0)
  returned = math.min(tonumber(ARGV[11]) or 0, units)
  if returned > 0 then
    -- A reward under the quota the slice was taken under: an override set
    -- since changed the rate, and pricing the return by it could give
    -- back up to a full bucket that was never taken.
    adjust(STATE, tonumber(ARGV[15]), tonumber(ARGV[16]), burst, -returned)
  end
end
if returned > 0 and (ARGV[12] == 'SPUBLISH' or ARGV[12] == 'PUBLISH') then
  redis.call(ARGV[12], ARGV[13], ARGV[14])
end

local granted, retry, spent = 0, -1, 0
if ARGV[1] == 'take' then
  local wanted, cost = tonumber(ARGV[3]), tonumber(ARGV[4])
  if block and (tonumber(block) or 0) > NOW_US then
    overridden = 2
  else
    local outstanding = 0
    for _, member in ipairs(redis.call('ZRANGE', SLICES, 0, -1)) do
      outstanding = outstanding + (tonumber(string.match(member, ':(%d+)$')) or 0)
    end
    local room = math.floor(limit * tonumber(ARGV[9]) / 1000000) - outstanding
    -- Cells free now, as a check counts them.
    local value = redis.call('GET', STATE)
    local admits, wait, free = decide(NOW_US, STATE, value, limit, period, burst, cost, false)
    granted = math.max(math.min(wanted, room, free), 0)
    if free < wanted then
      spent = 1
    end
    if not admits then
      retry = wait
    end
    if granted > 0 then
      -- Taken as a check of `granted` units would take them.
      decide(NOW_US, STATE, value, limit, period, burst, granted, true)
      local expires = NOW_US + tonumber(ARGV[5])
      redis.call('ZADD', SLICES, int(expires), ARGV[2] .. ':' .. int(granted))
    end
  end
elseif ARGV[1] ~= 'return' then
  return redis.error_reply('ERR shardlimit: unknown slice op ' .. tostring(ARGV[1]))
end

-- The slices live until the last one expires.
local last = redis.call('ZRANGE', SLICES, -1, -1, 'WITHSCORES')
if last[2] then
  redis.call('PEXPIREAT', SLICES, int(math.ceil(tonumber(last[2]) / 1000)))
end
return { granted, retry, limit, period, burst, overridden, spent }
