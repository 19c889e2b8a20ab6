-- cancel.lua: Cancel (not fenced: an operator call).
--
-- KEYS[1] entries hash   KEYS[2] pending zset   KEYS[3] inflight zset
-- KEYS[4] parked zset   KEYS[5] holds hash
-- ARGV[1] entry ID
-- Returns 1 when the entry was pending, claimed or parked and is now
-- deleted, 0 when this partition has no such entry (not found).
local id = ARGV[1]
local v = redis.call('HGET', KEYS[1], id)
if not v then return 0 end
local m = member(v, id)
local n = redis.call('ZREM', KEYS[2], m) + redis.call('ZREM', KEYS[3], m) + redis.call('ZREM', KEYS[4], id)
redis.call('HDEL', KEYS[1], id)
local key = entry_key(v)
if key ~= '' then holds_remove(KEYS[5], key, m) end
if n == 0 then return 0 end
return 1
