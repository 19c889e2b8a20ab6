-- requeue.lua: Requeue (not fenced: an operator call).
--
-- KEYS[1] entries hash   KEYS[2] pending zset   KEYS[3] parked zset
-- ARGV[1..] entry IDs
-- Returns the number of parked entries moved back to pending, due now,
-- with attempts reset to 0 (the last error is kept). IDs that are not
-- parked in this partition are ignored.
local now = now_ms()
local n = 0
for i = 1, #ARGV do
  local id = ARGV[i]
  if redis.call('ZREM', KEYS[3], id) == 1 then
    local v = redis.call('HGET', KEYS[1], id)
    if v then
      if #v >= 25 and string.byte(v, 1) == 1 then
        v = string.sub(v, 1, 17) .. struct.pack('>I4', 0) .. string.sub(v, 22)
        redis.call('HSET', KEYS[1], id, v)
      end
      redis.call('ZADD', KEYS[2], now, member(v, id))
      n = n + 1
    end
  end
end
return n
