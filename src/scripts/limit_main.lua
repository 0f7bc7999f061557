-- Rate-limit check, driver (see limit_prelude.lua for KEYS, ARGV and Reply).

local cost = tonumber(ARGV[1])
local states = {}
local all_ok = true
for i = 1, #KEYS do
  local a = 3 + 4 * (i - 1)
  local check = ALGOS[ARGV[a]]
  if not check then
    return redis.error_reply('ERR shardlimit: unknown algorithm ' .. tostring(ARGV[a]))
  end
  local s = check(KEYS[i], tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2]),
    tonumber(ARGV[a + 3]), cost)
  states[i] = s
  all_ok = all_ok and s.ok
end

-- Only now, with every decision made and every write formatted, write.
local consumed = all_ok and CONSUME
if consumed then
  for i = 1, #states do
    for _, command in ipairs(states[i].writes) do
      redis.call(unpack(command))
    end
  end
end

local reply = { all_ok and 1 or 0 }
for i = 1, #states do
  local s = states[i]
  reply[#reply + 1] = s.ok and 1 or 0
  reply[#reply + 1] = consumed and s.remaining_after or s.remaining_now
  reply[#reply + 1] = s.ok and -1 or s.retry
  reply[#reply + 1] = consumed and s.reset_after or s.reset_now
end
return reply
