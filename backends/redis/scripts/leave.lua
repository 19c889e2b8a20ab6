-- leave.lua: Leave (Membership).
--
-- KEYS[1] members hash   KEYS[2] member info hash (the prefix's own slot)
-- ARGV[1] owner
-- Returns 1 when the owner's record was deleted, 0 when it had none (a
-- no-op). Its info is deleted too.
redis.call('HDEL', KEYS[2], ARGV[1])
return redis.call('HDEL', KEYS[1], ARGV[1])
