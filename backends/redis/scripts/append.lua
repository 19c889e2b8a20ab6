-- append.lua: add entries to one partition, idempotent by ID.
--
-- KEYS[1] entries hash   KEYS[2] pending zset   KEYS[3] sequence counter
-- ARGV[1] notification channel ('' = do not publish)
-- ARGV[2..] triples: id, due time in ms ('' = now), encoded entry
--           (format version 1 with sequence and created-at zeroed)
-- Returns the number of entries added (IDs already present are skipped).
-- Needs nothing read beforehand, so it can be queued inside MULTI.
local now = now_us()
local n = (#ARGV - 1) / 3
local last = redis.call('INCRBY', KEYS[3], n)
local seq = last - n
local added = 0
for i = 2, #ARGV, 3 do
  local id, due, blob = ARGV[i], ARGV[i + 1], ARGV[i + 2]
  seq = seq + 1
  if string.byte(blob, 1) ~= 1 or #blob < 25 then
    return redis.error_reply('redisoutbox: append got an entry in an unknown encoding')
  end
  if redis.call('HEXISTS', KEYS[1], id) == 0 then
    local s8 = struct.pack('>I8', seq)
    redis.call('HSET', KEYS[1], id, '\1' .. s8 .. struct.pack('>I8', now) .. string.sub(blob, 18))
    local score = math.floor(now / 1000)
    if due ~= '' then score = tonumber(due) end
    redis.call('ZADD', KEYS[2], score, s8 .. id)
    added = added + 1
  end
end
if added > 0 and ARGV[1] ~= '' then
  redis.call('PUBLISH', ARGV[1], '1')
end
return added
