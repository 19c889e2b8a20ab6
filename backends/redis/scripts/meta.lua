-- meta.lua: New (reads the outbox's stored partition count, or stores it).
--
-- KEYS[1] meta hash (in the prefix's own slot): partitions, created-at ms
-- ARGV[1] partitions configured ('0' = only read the stored count)
-- Returns {partitions (as stored: a string), created-at ms, 1} when this
-- call stored ARGV[1],
-- {partitions, created-at ms, 0} when a count was stored already (whatever
-- ARGV[1] is: the caller compares), or 0 when none is stored and ARGV[1]
-- is '0' (nothing is written then).
--
-- The read and the write are one script, so two constructors racing to
-- create the same outbox agree: the first stores its count, the second
-- reads it (SET NX semantics).
local stored = redis.call('HGET', KEYS[1], 'partitions')
if stored then
  return {stored, tonumber(redis.call('HGET', KEYS[1], 'created-at') or '0') or 0, 0}
end
if ARGV[1] == '0' then return 0 end
local now = now_ms()
redis.call('HSET', KEYS[1], 'partitions', ARGV[1], 'created-at', now)
return {ARGV[1], now, 1}
