-- remove_exported.lua: RemoveExported (fenced).
--
-- KEYS[1] lease   KEYS[2] pending zset   KEYS[3] entries hash
-- KEYS[4] key-order zset   KEYS[5] parked zset   KEYS[6] history hash
-- KEYS[7] parked-at zset
-- ARGV[1] token "version:owner"   ARGV[2..] entry IDs
-- Returns -1 when the lease is lost (nothing changed), else the number of
-- entries removed. Each entry is deleted whatever its state (pending,
-- claimed, retrying, held back, parked): its value, its pending member or
-- parked member, its key-order member and its history. Nothing is
-- archived. Unknown
-- IDs (never here, removed already, of another partition) are ignored.
if not fenced(KEYS[1], ARGV[1]) then return -1 end
zsets(KEYS[2], KEYS[4], KEYS[5])
hashes(KEYS[3], KEYS[6])
local n = 0
for i = 2, #ARGV do
  local id = ARGV[i]
  local v = redis.call('HGET', KEYS[3], id)
  if v then
    v = as_v2(v)
    local m = member(v, id)
    redis.call('ZREM', KEYS[2], m)
    redis.call('ZREM', KEYS[5], id)
    redis.call('ZREM', KEYS[7], id)
    local key = string.byte(v, 1) == 2 and key_of(v) or ''
    if key ~= '' and #v >= 25 then redis.call('ZREM', KEYS[4], order_member(key, v, m)) end
    redis.call('HDEL', KEYS[3], id)
    redis.call('HDEL', KEYS[6], id)
    n = n + 1
  end
end
return n
