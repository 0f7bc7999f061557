-- The state of one key for the Limits page's actions
-- (src/admin/scanner/actions.rs): its Redis type and its TTL, read together
-- on its slot.
--
-- KEYS[1]  the key
-- ARGV     none
-- Reply    {type, pttl}: type 'none' and pttl -2 when the key does not
--          exist, pttl -1 when it has no TTL
return {redis.call('TYPE', KEYS[1])['ok'], redis.call('PTTL', KEYS[1])}
