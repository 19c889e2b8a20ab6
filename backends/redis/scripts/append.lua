-- append.lua: add entries to one partition, idempotent by ID.
--
-- KEYS[1] entries hash   KEYS[2] pending zset   KEYS[3] sequence counter
-- KEYS[4] sealed flag (a string; the outbox is sealed while it exists)
-- ARGV[1] the partition's notification channel ('' = do not publish)
-- ARGV[2] the partition number (the notification's payload)
-- ARGV[3..] triples: id, due time in ms ('' = now), encoded entry
--           (format 2 with sequence, created-at and position zeroed)
-- Returns the number of entries added (IDs already present are skipped),
-- or the error 'SEALED ...' when the partition is sealed (Sealer): checked
-- here, at EXEC, so an append that runs after Seal set the flag fails,
-- before anything is written (CheckExec maps it to outbox.ErrSealed).
-- Needs nothing read beforehand, so it can be queued inside MULTI.
--
-- When it added entries it publishes the partition number, as decimal, on
-- the partition's channel with SPUBLISH (sharded pub/sub): the channel
-- carries the partition's hash tag, so on Redis Cluster the message stays
-- on the partition's shard instead of being broadcast to every node.
--
-- An entry's position (its place in its key's order) is its first due
-- time: the due time given, else now; it is also its score, so the claim
-- needs no key-order member for it (see claim.lua).
--
-- This script is standalone (no lib.lua): AppendInTx sends its whole body
-- with every EVAL and the server hashes it each time, so it holds only
-- what an append needs. Layouts: see lib.lua.
-- Fail before the first write when a key has the wrong type (Redis does
-- not undo a failed script's writes: an entry without its pending member
-- would be lost, and a retried append would skip it as present).
if redis.call('EXISTS', KEYS[4]) == 1 then
  return redis.error_reply('SEALED redisoutbox: the outbox is sealed (moved to another outbox); append to its destination')
end
redis.call('HLEN', KEYS[1])
redis.call('ZCARD', KEYS[2])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local nowms = math.floor(now / 1000)
local n = (#ARGV - 2) / 3
-- Front hint invariant (fronthint.go): every script that puts a member
-- into pending or moves one within it changes the sequence counter.
-- Here: the INCRBY below, before any ZADD to pending.
local seq = redis.call('INCRBY', KEYS[3], n) - n
local pack, unpack, sub = struct.pack, struct.unpack, string.sub
local created = pack('>I8', now)
local added = 0
for i = 3, #ARGV, 3 do
  local id, due, blob = ARGV[i], ARGV[i + 1], ARGV[i + 2]
  seq = seq + 1
  local el = #blob >= 37 and unpack('>I4', blob, 30)
  if string.byte(blob, 1) ~= 2 or not el or #blob < 37 + el then
    return redis.error_reply('redisoutbox: append got an entry in an unknown encoding')
  end
  local pos = nowms
  if due ~= '' then pos = tonumber(due) end
  local s8, p8 = pack('>I8', seq), pack('>I8', pos)
  if redis.call('HSETNX', KEYS[1], id, '\2' .. s8 .. created .. p8 .. sub(blob, 26)) == 1 then
    redis.call('ZADD', KEYS[2], pos, s8 .. id)
    added = added + 1
  end
end
if added > 0 and ARGV[1] ~= '' then
  redis.call('SPUBLISH', ARGV[1], ARGV[2])
end
return added
