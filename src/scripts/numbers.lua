-- Numbers a script writes, and the errors of a write refused: follows
-- clock.lua in every rate-limit script.
--
-- A number written is an integer in [0, 2^53): above 2^53 a double no
-- longer holds every integer, and string.format('%d') would silently wrap
-- what is out of range (a wrapped timestamp reads as "long ago"). The
-- client bounds every quota so that no number leaves that range; these
-- checks are the last line of defence, made before anything is written, so
-- a check that fails writes nothing.

local MAX_EXACT = 9007199254740992

-- Raises the error of a number out of range (so the script writes nothing).
local function out_of_range(x)
  error({ err = 'ERR shardlimit: number out of range: ' .. tostring(x) })
end

-- `x` formatted as an integer, or the error above.
local function int(x)
  if type(x) ~= 'number' or x ~= x or x < 0 or x >= MAX_EXACT or x ~= math.floor(x) then
    out_of_range(x)
  end
  return string.format('%d', x)
end

-- Raises the error of a string state that cannot be written: read as
-- absent by an MGET (which reads a key of another type as absent where GET
-- would refuse it), it is written only if still absent (SET ... NX), so a
-- key of another type is refused, never replaced.
local function wrong_type(key)
  error({ err = 'WRONGTYPE Operation against a key holding the wrong kind of value: ' .. key })
end
