-- leave.lua: Leave (Membership).
--
-- KEYS[1] members hash (in the prefix's own slot)
-- ARGV[1] owner
-- Returns 1 when the owner's record was deleted, 0 when it had none (a
-- no-op).
return redis.call('HDEL', KEYS[1], ARGV[1])
