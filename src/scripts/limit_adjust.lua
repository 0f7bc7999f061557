-- A change to one limit of one subject, other than a check: reset, block,
-- unblock, penalize, reward, override, clear the override, or just read.
-- Assembled as the generic check is (see limit_prelude.lua), this file in
-- place of limit_main.lua: penalize and reward are each algorithm's own
-- adjust(). All KEYS share the subject's hash slot.
--
-- KEYS[1]  the limit's state key for the subject
-- KEYS[2]  the subject's override of the limit ("limit period_us burst")
-- KEYS[3]  the subject's block of the limit (server time blocked until, us)
-- ARGV[1]  op: reset | block | unblock | penalize | reward | override |
--          unoverride | read
-- ARGV[2]  block: duration (us); penalize, reward: units; override: TTL (ms);
--          otherwise ignored (all checked by the client)
-- ARGV[3..6]  algorithm code, limit, period (us), burst: the limiter's default
--          quota (penalize and reward apply the override instead, if any);
--          for override, the new quota
-- ARGV[7]  PUBLISH or SPUBLISH: how to tell the deny caches of every process
--          that this subject's denials may no longer hold ('' = nobody)
-- ARGV[8]  the channel (in KEYS' slot, for SPUBLISH)
-- ARGV[9]  the message: KEYS[1]
-- ARGV[10] inline mode only (see below): the override's value ('' = none)
--
-- Inline mode, for a slot under migration (see limit_prelude.lua): KEYS holds
-- only KEYS[1], the op is reward, and the override's value comes in
-- ARGV[10], read by the client just before. The reply is then
-- { ARGV[10], -2, 0 }: the block and the override's TTL are not read.
--
-- Reply: { override ("limit period_us burst" or ""), override_ttl_ms (-2:
--          none), blocked_for_us (0: not blocked) }, as they are after the op.
--
-- Penalize counts units as an admitted request would, without checking,
-- never past an empty quota; reward gives units back, never past a full one.
-- Every key written has a TTL: a block until it ends, an override for
-- ARGV[2], state as a check writes it.

-- The override held in the override key `key` (see parse_override()).
local function override(key)
  return parse_override(redis.call('GET', key), key)
end

-- The server time (us) the block `key` holds the subject blocked until.
local function blocked_until(key)
  return parse_block(redis.call('GET', key))
end

local op = ARGV[1]
local amount = tonumber(ARGV[2])
local code, limit, period, burst = ARGV[3], tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6])
local algo = ALGOS[code]
if not algo then
  return redis.error_reply('ERR shardlimit: unknown algorithm ' .. tostring(code))
end

local inline = #KEYS == 1
if inline and op ~= 'reward' then
  return redis.error_reply('ERR shardlimit: only reward runs on the state key alone, not ' .. tostring(op))
end

-- Whether anything was written (then the deny caches are told).
local wrote = true
if op == 'reset' then
  redis.call('DEL', KEYS[1])
elseif op == 'block' then
  local until_us = NOW_US + amount
  redis.call('SET', KEYS[3], int(until_us), 'PXAT', int(math.ceil(until_us / 1000)))
elseif op == 'unblock' then
  redis.call('DEL', KEYS[3])
elseif op == 'penalize' or op == 'reward' then
  local ol, op_, ob
  if inline then
    ol, op_, ob = parse_override(ARGV[10], KEYS[1] .. ':quota')
  else
    ol, op_, ob = override(KEYS[2])
  end
  if ol then
    limit, period, burst = ol, op_, ob
  end
  local delta = amount
  if op == 'reward' then
    delta = -amount
  end
  wrote = algo.adjust(KEYS[1], limit, period, burst, delta)
elseif op == 'override' then
  redis.call('SET', KEYS[2], int(limit) .. ' ' .. int(period) .. ' ' .. int(burst), 'PX', int(amount))
elseif op == 'unoverride' then
  redis.call('DEL', KEYS[2])
elseif op == 'read' then
  wrote = false
else
  return redis.error_reply('ERR shardlimit: unknown op ' .. tostring(op))
end

if wrote and (ARGV[7] == 'SPUBLISH' or ARGV[7] == 'PUBLISH') then
  redis.call(ARGV[7], ARGV[8], ARGV[9])
end

if inline then
  return { ARGV[10], -2, 0 }
end
local current = redis.call('GET', KEYS[2]) or ''
local ttl = -2
if current ~= '' then
  ttl = redis.call('PTTL', KEYS[2])
end
return { current, ttl, math.max(blocked_until(KEYS[3]) - NOW_US, 0) }
