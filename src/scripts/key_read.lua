-- Read one key on its own, while its slot migrates: one key, so Redis serves
-- it on whichever side of the migration holds it (following ASK). A rate
-- limit's override or block (src/limit/migrating.rs, limit_prelude.lua's
-- inline mode) or a lock's fence (src/lock.rs).
--
-- KEYS[1]  the key (a string)
-- ARGV     none
-- Reply    its value, or nil when it does not exist
return redis.call('GET', KEYS[1])
