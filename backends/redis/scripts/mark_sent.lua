-- mark_sent.lua: MarkSent (fenced).
--
-- KEYS[1] lease   KEYS[2] pending zset   KEYS[3] inflight zset
-- KEYS[4] entries hash   KEYS[5] holds hash
-- ARGV[1] token "version:owner"   ARGV[2..] entry IDs
-- Returns -1 when the lease is lost (nothing changed), else the number of
-- entries removed. Unknown, already sent and parked IDs are ignored.
if not fenced(KEYS[1], ARGV[1]) then return -1 end
local n = 0
for i = 2, #ARGV do
  local id = ARGV[i]
  local v = redis.call('HGET', KEYS[4], id)
  if v then
    local m = member(v, id)
    if redis.call('ZREM', KEYS[3], m) + redis.call('ZREM', KEYS[2], m) > 0 then
      redis.call('HDEL', KEYS[4], id)
      local key = entry_key(v)
      if key ~= '' and attempts_of(v) > 0 then holds_remove(KEYS[5], key, m) end
      n = n + 1
    end
  end
end
return n
