-- purge.lua: Store.Purge's removal of old records, after its ZRANGE of the
-- candidates (the oldest first, at most limit of each kind).
--
-- KEYS[1] ids zset ("<prefix>:ids")   KEYS[2] seqs zset ("<prefix>:seqs")
-- KEYS[3 .. 2+n] the candidate IDs' keys ("<prefix>:id:<id>")
-- KEYS[3+n ..] the candidate message keys' keys ("<prefix>:seq:<key>")
-- ARGV[1] before, in ms: only a record scored below it is removed
-- ARGV[2] n, the number of candidate IDs
-- ARGV[2+i] the member of KEYS[1] or KEYS[2] that KEYS[2+i] belongs to:
-- the ID for i <= n, the message key after that
-- Returns {IDs removed, keys removed}.
--
-- Each candidate's score is read again: one recorded (or set) again since
-- the ZRANGE, or already removed by another Purge, is left alone, so a
-- stale candidate list never removes a fresh record.
local before = tonumber(ARGV[1])
local n = tonumber(ARGV[2])
local removed = {0, 0}
for i = 1, #KEYS - 2 do
  local zset, kind = KEYS[1], 1
  if i > n then
    zset, kind = KEYS[2], 2
  end
  local member = ARGV[2 + i]
  local score = redis.call('ZSCORE', zset, member)
  if score and tonumber(score) < before then
    redis.call('ZREM', zset, member)
    redis.call('DEL', KEYS[2 + i])
    removed[kind] = removed[kind] + 1
  end
end
return removed
