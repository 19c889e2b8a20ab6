-- hold.lua: Hold, the outbox-wide record (in the prefix's own slot).
--
-- KEYS[1] meta hash
-- ARGV[1] reason
-- Returns the hold's Since in ms by the server's TIME: the first one
-- (HSETNX), kept when the outbox is held already. The reason is replaced.
-- The partitions are held after this (hold_part.lua, with this Since).
hashes(KEYS[1])
redis.call('HSETNX', KEYS[1], 'hold-since', now_ms())
redis.call('HSET', KEYS[1], 'hold-reason', ARGV[1])
return tonumber(redis.call('HGET', KEYS[1], 'hold-since'))
