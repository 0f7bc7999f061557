-- Release a lock, only if it is still held with our token (a plain
-- DEL after expiry would delete the next holder's lock).
--
-- KEYS[1]  the lock key
-- KEYS[2]  the fence key: deliberately untouched, it has its own ttl and
--          must outlive the lock so the next token is larger
-- ARGV[1]  our token
--
-- Reply    1 when released; 0 when it had expired or another holder has it
--          (nothing is changed then).
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
