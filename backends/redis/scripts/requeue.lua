-- requeue.lua: Requeue (not fenced: an operator call).
--
-- KEYS[1] entries hash   KEYS[2] pending zset   KEYS[3] parked zset
-- KEYS[4] sequence counter
-- ARGV[1..] entry IDs
-- Returns the number of parked entries moved back to pending, due now,
-- with attempts reset to 0 (the last error is kept). IDs that are not
-- parked in this partition are ignored.
--
-- A requeued entry gets a new append sequence, so it orders after the
-- entries already due in the same millisecond (the requeued ones keep
-- their original order among themselves).
local now = now_ms()
local found = {}
for i = 1, #ARGV do
  local id = ARGV[i]
  if redis.call('ZREM', KEYS[3], id) == 1 then
    local v = redis.call('HGET', KEYS[1], id)
    if v and #v >= 25 and string.byte(v, 1) == 1 then
      found[#found + 1] = {id, v}
    elseif v then
      redis.call('ZADD', KEYS[3], 0, id) -- unreadable header: stays parked
    end
  end
end
if #found == 0 then return 0 end
table.sort(found, function(x, y) return seq_of(string.sub(x[2], 2, 9)) < seq_of(string.sub(y[2], 2, 9)) end)
local seq = redis.call('INCRBY', KEYS[4], #found) - #found
for _, f in ipairs(found) do
  local id, v = f[1], f[2]
  seq = seq + 1
  v = string.sub(v, 1, 1) .. struct.pack('>I8', seq) .. string.sub(v, 10, 17) .. struct.pack('>I4', 0) .. string.sub(v, 22)
  redis.call('HSET', KEYS[1], id, v)
  redis.call('ZADD', KEYS[2], now, member(v, id))
end
return #found
