-- KEYS[1] the subject's theoretical arrival time (us)
-- ARGV[1] emission interval (us), ARGV[2] burst (cells)
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local interval = tonumber(ARGV[1])
local tolerance = interval * tonumber(ARGV[2])
local tat = math.max(tonumber(redis.call('GET', KEYS[1]) or 0), now)
local new_tat = tat + interval
local allow_at = new_tat - tolerance
if allow_at > now then
  return { 0, 0, math.ceil(allow_at - now), math.ceil(tat - now) }
end
redis.call('SET', KEYS[1], string.format('%d', new_tat), 'PX', math.ceil((new_tat - now) / 1000))
return { 1, math.floor((now + tolerance - new_tat) / interval), -1, math.ceil(new_tat - now) }
