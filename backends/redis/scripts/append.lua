-- append.lua: add entries to one partition, idempotent by ID.
--
-- KEYS[1] entries hash   KEYS[2] pending zset   KEYS[3] sequence counter
-- KEYS[4] key-order zset
-- ARGV[1] notification channel ('' = do not publish)
-- ARGV[2..] triples: id, due time in ms ('' = now), encoded entry
--           (format 2 with sequence, created-at and position zeroed)
-- Returns the number of entries added (IDs already present are skipped).
-- Needs nothing read beforehand, so it can be queued inside MULTI.
--
-- An entry's position (its place in its key's order) is its first due
-- time: the due time given, else now. An entry with a non-empty key joins
-- the key order.
local now = now_us()
local nowms = math.floor(now / 1000)
local n = (#ARGV - 1) / 3
local last = redis.call('INCRBY', KEYS[3], n)
local seq = last - n
local added = 0
for i = 2, #ARGV, 3 do
  local id, due, blob = ARGV[i], ARGV[i + 1], ARGV[i + 2]
  seq = seq + 1
  if string.byte(blob, 1) ~= 2 or #blob < 37 or #blob < 37 + u32(blob, 30) then
    return redis.error_reply('redisoutbox: append got an entry in an unknown encoding')
  end
  if redis.call('HEXISTS', KEYS[1], id) == 0 then
    local s8 = struct.pack('>I8', seq)
    local pos = nowms
    if due ~= '' then pos = tonumber(due) end
    local p8 = struct.pack('>I8', pos)
    redis.call('HSET', KEYS[1], id, '\2' .. s8 .. struct.pack('>I8', now) .. p8 .. string.sub(blob, 26))
    redis.call('ZADD', KEYS[2], pos, s8 .. id)
    local at = 34 + u32(blob, 30)
    local kl = u32(blob, at)
    if kl > 0 then
      redis.call('ZADD', KEYS[4], 0, string.sub(blob, at, at + 3 + kl) .. p8 .. s8 .. id)
    end
    added = added + 1
  end
end
if added > 0 and ARGV[1] ~= '' then
  redis.call('PUBLISH', ARGV[1], '1')
end
return added
