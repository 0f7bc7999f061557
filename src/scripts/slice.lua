-- Quota slices of one GCRA limit of one subject: take a slice (consume N
-- cells now, decided later in the process that holds it) or return what a
-- slice did not use (give cells back, like a reward). Follows clock.lua.
-- All KEYS share the subject's hash slot.
--
-- KEYS[1]  the limit's state key for the subject (the GCRA's TAT, us)
-- KEYS[2]  the subject's override of the limit ("limit period_us burst")
-- KEYS[3]  the subject's block of the limit (server time blocked until, us)
-- KEYS[4]  the subject's outstanding slices: a string of entries
--          "<id>:<units>:<expires>" separated by spaces, <id> hex, <expires>
--          the server time (us) the slice expires at; "<id>:<units>" is
--          the slice's member
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
--          back, in all (deny caches forget the subject); '' = nobody
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
--
-- What it costs Redis: TIME, one MGET of the four keys, and at most one
-- write of each (the slices, the state), with a PUBLISH when units came
-- back in all — 4 to 6 commands besides the EVALSHA. (The slices were a
-- sorted set, read and written by six commands, and the give-back a
-- reward of its own: 10 to 14.)

local STATE, SLICES = KEYS[1], KEYS[4]
local limit, period, burst = tonumber(ARGV[6]), tonumber(ARGV[7]), tonumber(ARGV[8])
local overridden = 0
-- Everything read at once. MGET reads a key of another type as absent:
-- each is then written only if still absent (SET NX), so such a key is
-- refused, never replaced.
local got = redis.call('MGET', KEYS[2], KEYS[3], STATE, SLICES)
local override, block, value, held = got[1], got[2], got[3], got[4]
if override then
  local l, p, b = string.match(override, '^(%d+) (%d+) (%d+)$')
  if not l then
    return redis.error_reply('ERR shardlimit: malformed override in ' .. KEYS[2])
  end
  limit, period, burst = tonumber(l), tonumber(p), tonumber(b)
  overridden = 1
end

-- The outstanding slices but the expired ones and the one given back,
-- and what that one held.
local kept, outstanding, last, changed, returning = {}, 0, 0, false, nil
if held then
  for entry in string.gmatch(held, '%S+') do
    local member, units, expires = string.match(entry, '^(%x+:(%d+)):(%d+)$')
    if not member then
      return redis.error_reply('ERR shardlimit: malformed slices in ' .. SLICES)
    end
    units, expires = tonumber(units), tonumber(expires)
    if expires <= NOW_US then
      changed = true
    elseif member == ARGV[10] then
      changed, returning = true, units
    else
      kept[#kept + 1] = entry
      outstanding = outstanding + units
      last = math.max(last, expires)
    end
  end
end

-- The TAT this call found (now, if it holds nothing), then with the
-- returned slice's unused units given back: a reward under the quota the
-- slice was taken under (an override set since changed the rate, and
-- pricing the return by it could give back up to a full bucket that was
-- never taken), never past a full bucket.
local before = NOW_US
if value then
  before = math.max(value + 0, NOW_US)
end
local tat, returned = before, 0
if returning then
  returned = math.min(tonumber(ARGV[11]) or 0, returning)
  if returned > 0 then
    tat = given_back(NOW_US, tat, tonumber(ARGV[15]), tonumber(ARGV[16]), returned)
  end
end

local granted, retry, spent = 0, -1, 0
if ARGV[1] == 'take' then
  local wanted, cost = tonumber(ARGV[3]), tonumber(ARGV[4])
  if block and (tonumber(block) or 0) > NOW_US then
    overridden = 2
  else
    local room = math.floor(limit * tonumber(ARGV[9]) / 1000000) - outstanding
    -- Cells free now, as a check counts them (after the give-back).
    local admits, wait, free = decide(NOW_US, STATE, value and tat, limit, period, burst, cost, false)
    granted = math.max(math.min(wanted, room, free), 0)
    if free < wanted then
      spent = 1
    end
    if not admits then
      retry = wait
    end
    if granted > 0 then
      local expires = NOW_US + tonumber(ARGV[5])
      kept[#kept + 1] = ARGV[2] .. ':' .. int(granted) .. ':' .. int(expires)
      last = math.max(last, expires)
      changed = true
    end
  end
elseif ARGV[1] ~= 'return' then
  return redis.error_reply('ERR shardlimit: unknown slice op ' .. tostring(ARGV[1]))
end

-- The slices first: refused (WRONGTYPE) before anything is written if
-- another type holds the key. They live until the last one expires.
if changed then
  if #kept == 0 then
    redis.call('DEL', SLICES)
  else
    local at = int(math.ceil(last / 1000))
    if held then
      redis.call('SET', SLICES, table.concat(kept, ' '), 'PXAT', at)
    elseif not redis.call('SET', SLICES, table.concat(kept, ' '), 'PXAT', at, 'NX') then
      return redis.error_reply('WRONGTYPE Operation against a key holding the wrong kind of value: ' .. SLICES)
    end
  end
end
-- Then the state, once: taken as a check of `granted` units would take
-- them, from the TAT after the give-back; or the give-back alone.
local after = tat
if granted > 0 then
  -- The TAT it writes is now + its reset (both rounded up alike).
  local _, _, _, reset = decide(NOW_US, STATE, value and tat, limit, period, burst, granted, true)
  after = NOW_US + reset
elseif returned > 0 and value then
  if tat <= NOW_US then
    redis.call('DEL', STATE)
  else
    redis.call('SET', STATE, int(tat), 'PXAT', int(math.ceil(tat / 1000)))
  end
end
-- Every process is told only when units came back in all: a take that
-- takes at least what it gave back frees nothing a denial was decided on.
if after < before and (ARGV[12] == 'SPUBLISH' or ARGV[12] == 'PUBLISH') then
  redis.call(ARGV[12], ARGV[13], ARGV[14])
end
return { granted, retry, limit, period, burst, overridden, spent }
