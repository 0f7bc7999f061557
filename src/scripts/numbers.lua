-- Numbers a script writes: follows clock.lua in the scripts that adjust a
-- limit (limit_adjust.lua, slice.lua). The checks leave it out: every
-- function a script defines costs Redis on every call, and each
-- algorithm's decide checks its numbers itself.
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
