-- mark_sent.lua: MarkSent (fenced).
--
-- KEYS[1] lease   KEYS[2] pending zset   KEYS[3] entries hash
-- KEYS[4] key-order zset
-- ARGV[1] token "version:owner"   ARGV[2..] entry IDs
-- Returns -1 when the lease is lost (nothing changed), else the number of
-- entries removed. Unknown, already sent and parked IDs are ignored.
--
-- A sent entry leaves the key-order set (if it was there), so it no
-- longer holds back the entries after it.
if not fenced(KEYS[1], ARGV[1]) then return -1 end
zsets(KEYS[2], KEYS[4])
hashes(KEYS[3])
local n = 0
for i = 2, #ARGV do
  local id = ARGV[i]
  local v = redis.call('HGET', KEYS[3], id)
  if v then
    v = as_v2(v)
    local m = member(v, id)
    if redis.call('ZREM', KEYS[2], m) == 1 then
      redis.call('HDEL', KEYS[3], id)
      local key = key_of(v)
      if key ~= '' then redis.call('ZREM', KEYS[4], order_member(key, v, m)) end
      n = n + 1
    end
  end
end
return n
