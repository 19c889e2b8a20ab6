-- stats.lua: Stats for one partition (read-only).
--
-- KEYS[1] pending zset   KEYS[2] inflight zset   KEYS[3] parked zset
-- Returns {pending, due, parked, oldest due score in ms or -1}: pending
-- counts pending and claimed entries, due those of them whose score has
-- come (claimed entries were due when claimed).
local now = now_ms()
local claimed = redis.call('ZCARD', KEYS[2])
local pending = redis.call('ZCARD', KEYS[1]) + claimed
local due = redis.call('ZCOUNT', KEYS[1], '-inf', now) + claimed
local oldest = -1
local a = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'WITHSCORES', 'LIMIT', 0, 1)
if #a > 0 then oldest = tonumber(a[2]) end
local b = redis.call('ZRANGE', KEYS[2], 0, 0, 'WITHSCORES')
if #b > 0 and (oldest < 0 or tonumber(b[2]) < oldest) then oldest = tonumber(b[2]) end
return {pending, due, redis.call('ZCARD', KEYS[3]), oldest}
