-- stats.lua: Stats and PartitionStats for one partition (read-only).
--
-- KEYS[1] pending zset   KEYS[2] parked zset   KEYS[3] lease
-- Returns {pending, due, parked, oldest due score in ms or -1, now in ms,
-- lease value "version:owner" or '' when the partition is free (the key
-- expired or was deleted), the lease's PTTL in ms (-2 when there is no
-- lease, -1 when the key has no expiry)}: pending counts every unfinished
-- entry (claimed ones stay in pending), due those whose score has come.
-- Every count and the lease are read at one moment, by the server's TIME.
local now = now_ms()
local oldest = -1
local a = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'WITHSCORES', 'LIMIT', 0, 1)
if #a > 0 then oldest = tonumber(a[2]) end
local lease = redis.call('GET', KEYS[3]) or ''
return {redis.call('ZCARD', KEYS[1]), redis.call('ZCOUNT', KEYS[1], '-inf', now), redis.call('ZCARD', KEYS[2]), oldest,
  now, lease, redis.call('PTTL', KEYS[3])}
