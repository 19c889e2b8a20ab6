-- requeue.lua: Requeue (not fenced: an operator call).
--
-- KEYS[1] entries hash   KEYS[2] pending zset   KEYS[3] parked zset
-- KEYS[4] sequence counter
-- ARGV[1..] entry IDs
-- Returns the number of parked entries moved back to pending, due now,
-- with attempts reset to 0 (the last error is kept). IDs that are not
-- parked in this partition are ignored; a parked value that does not parse
-- stays parked.
--
-- A requeued entry is ordered as if appended now: it gets a new append
-- sequence and its position becomes now, so it orders after the entries
-- already due, also in its key's order (the requeued ones keep their
-- original order among themselves). A format 1 entry is written back in
-- format 2.
local now = now_ms()
local found = {}
for i = 1, #ARGV do
  local id = ARGV[i]
  if redis.call('ZREM', KEYS[3], id) == 1 then
    local v = redis.call('HGET', KEYS[1], id)
    if v then
      local key = parse(v)
      if key then
        found[#found + 1] = {id, (as_v2(v)), key}
      else
        redis.call('ZADD', KEYS[3], 0, id) -- unreadable: stays parked
      end
    end
  end
end
if #found == 0 then return 0 end
table.sort(found, function(x, y) return seq_of(string.sub(x[2], 2, 9)) < seq_of(string.sub(y[2], 2, 9)) end)
local seq = redis.call('INCRBY', KEYS[4], #found) - #found
for _, f in ipairs(found) do
  local id, v, key = f[1], f[2], f[3]
  seq = seq + 1
  v = '\2' .. struct.pack('>I8', seq) .. string.sub(v, 10, 17) .. struct.pack('>I8I4', now, 0) .. string.sub(v, 30)
  redis.call('HSET', KEYS[1], id, v)
  local m = member(v, id)
  redis.call('ZADD', KEYS[2], now, m)
end
return #found
