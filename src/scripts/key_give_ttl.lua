-- Gives one key a TTL, only when it has none (src/admin/scanner/actions.rs):
-- a TTL it has is never changed, and a key deleted or given a TTL since the
-- confirmation was shown is left alone. One script, so the test and the
-- PEXPIRE are one step (PEXPIRE … NX, the same, needs Redis 7).
--
-- KEYS[1]  the key
-- ARGV[1]  the TTL in milliseconds
-- Reply    1 when the TTL was given, 0 when the key has one or is gone
if redis.call('PTTL', KEYS[1]) ~= -1 then
  return 0
end
return redis.call('PEXPIRE', KEYS[1], ARGV[1])
