-- append_keyseq.lua: append.lua with per-key sequence numbers
-- (Options.KeySequence). Only appends of a Backend with the option run
-- it; the others run append.lua, unchanged.
--
-- KEYS[1] entries hash   KEYS[2] pending zset   KEYS[3] sequence counter
-- KEYS[4] key sequence hash (entry key -> last number given)
-- KEYS[5] sealed flag (as append.lua's KEYS[4])
-- ARGV[1] the partition's notification channel ('' = do not publish)
-- ARGV[2] the partition number (the notification's payload)
-- ARGV[3..] quadruples: id, due time in ms ('' = now), encoded entry
--           (format 2 with sequence, created-at and position zeroed),
--           offset ('' = the entry gets no number). With an offset, the
--           encoded entry already counts the key sequence header and
--           holds its name as its last header; offset is the number of
--           bytes before the place of that header's value, where the
--           script writes the value's length and the value (the key's
--           next number, decimal).
-- Returns the number of entries added (IDs already present are skipped
-- and take no number), or the error 'SEALED ...' as append.lua.
--
-- A number is kept (HINCRBY, given back with HINCRBY -1 when the ID is
-- already stored) only for an entry that is added, in the same script as
-- the entry, and the script runs inside the caller's MULTI/EXEC: a DISCARDed transaction (or one that never reaches EXEC)
-- takes no number, and every number taken belongs to a stored entry.
-- Standalone, like append.lua (sent in full by every AppendInTx).
--
-- Fail before the first write when a key has the wrong type.
if redis.call('EXISTS', KEYS[5]) == 1 then
  return redis.error_reply('SEALED redisoutbox: the outbox is sealed (moved to another outbox); append to its destination')
end
redis.call('HLEN', KEYS[1])
redis.call('ZCARD', KEYS[2])
redis.call('HLEN', KEYS[4])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local nowms = math.floor(now / 1000)
local n = (#ARGV - 2) / 4
-- Front hint invariant (fronthint.go): every script that puts a member
-- into pending or moves one within it changes the sequence counter.
-- Here: the INCRBY below, before any ZADD to pending.
local seq = redis.call('INCRBY', KEYS[3], n) - n
local pack, unpack, sub = struct.pack, struct.unpack, string.sub
local created = pack('>I8', now)
local added = 0
for i = 3, #ARGV, 4 do
  local id, due, blob, off = ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3]
  seq = seq + 1
  local el = #blob >= 37 and unpack('>I4', blob, 30)
  if string.byte(blob, 1) ~= 2 or not el or #blob < 37 + el then
    return redis.error_reply('redisoutbox: append got an entry in an unknown encoding')
  end
  local pos = nowms
  if due ~= '' then pos = tonumber(due) end
  local s8, p8 = pack('>I8', seq), pack('>I8', pos)
  local ok
  if off == '' then
    ok = redis.call('HSETNX', KEYS[1], id, '\2' .. s8 .. created .. p8 .. sub(blob, 26))
  else
    -- Take the key's next number, and give it back when the ID is
    -- already stored (one call fewer per entry than asking first).
    local o = tonumber(off)
    local kl = unpack('>I4', blob, 34 + el)
    local key = sub(blob, 38 + el, 37 + el + kl)
    local ks = string.format('%d', redis.call('HINCRBY', KEYS[4], key, 1))
    ok = redis.call('HSETNX', KEYS[1], id, '\2' .. s8 .. created .. p8 .. sub(blob, 26, o) .. pack('>I4', #ks) .. ks .. sub(blob, o + 1))
    if ok == 0 then
      redis.call('HINCRBY', KEYS[4], key, -1)
    end
  end
  if ok == 1 then
    redis.call('ZADD', KEYS[2], pos, s8 .. id)
    added = added + 1
  end
end
if added > 0 and ARGV[1] ~= '' then
  redis.call('SPUBLISH', ARGV[1], ARGV[2])
end
return added
