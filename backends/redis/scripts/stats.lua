-- stats.lua: Stats for one partition (read-only).
--
-- KEYS[1] pending zset   KEYS[2] parked zset
-- Returns {pending, due, parked, oldest due score in ms or -1}: pending
-- counts every unfinished entry (claimed ones stay in pending), due those
-- whose score has come.
local now = now_ms()
local oldest = -1
local a = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'WITHSCORES', 'LIMIT', 0, 1)
if #a > 0 then oldest = tonumber(a[2]) end
return {redis.call('ZCARD', KEYS[1]), redis.call('ZCOUNT', KEYS[1], '-inf', now), redis.call('ZCARD', KEYS[2]), oldest}
