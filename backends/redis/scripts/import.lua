-- import.lua: Import, the entries of one partition (not fenced).
--
-- KEYS[1] entries hash   KEYS[2] pending zset   KEYS[3] sequence counter
-- KEYS[4] key-order zset   KEYS[5] parked zset   KEYS[6] hold hash
-- KEYS[7] history hash   KEYS[8] parked-at zset (an imported parked
-- entry's park time is the import's)
-- ARGV[1..] quintuples: id, kind ('p' parked, 'a' attempted or deferred, 'n' never
--           attempted and scheduled by NotBefore, 'u' never attempted
--           and not scheduled), due time in ms, rounded up ('' = now;
--           ignored when parked),
--           encoded entry (format 2 with created-at, attempts and last
--           error set; sequence and position zeroed), history value
--           ('' for none; see "History" in lib.lua), written with the
--           entry
-- Returns the number of entries added (IDs already present, appended or
-- imported, are skipped; within one call the first occurrence wins).
--
-- Placement ahead of every appended entry:
--   - sequence: from the block hold_part.lua reserved when the partition
--     is held (below every sequence appended since the hold), else from
--     the append counter;
--   - due time: an entry due by the server's TIME rounded up to the ms
--     (for kind 'u', within SKEW ms of it: an entry that was never
--     attempted and has no NotBefore was due at its source when it was
--     appended there, and a due time ahead of this server's clock by less
--     than that is the two clocks' skew) is made
--     due at min(its due time, the hold's since or now) - 1 ms: before
--     every entry appended since the hold (or until now) that is due no
--     earlier, also at the same millisecond, where the pending set would
--     otherwise order by sequence (an import that is not held takes
--     sequences above the entries appended before it); a scheduled or
--     retrying entry due later keeps its due time;
--   - key order: every imported entry but a scheduled one (never
--     attempted, due later) gets position 0 and, when it has a key, a
--     key-order member (it is marked): a key's order is (position,
--     sequence), so it comes before every appended entry of its key, and
--     the imported ones among themselves in the order imported, whatever
--     the clocks said. A scheduled entry takes its position at its due
--     time, as an appended one does (unmarked: score = position).
hashes(KEYS[1], KEYS[6], KEYS[7])
zsets(KEYS[2], KEYS[4], KEYS[5])
local bad = counter(KEYS[3])
if bad then return bad end
local nowu = now_us()
local now = math.ceil(nowu / 1000)
local SKEW = 60000
local since = redis.call('HGET', KEYS[6], 'since')
local floor = since and tonumber(since) or math.floor(nowu / 1000)
local cnt = #ARGV / 5
local seq
local nxt, last = redis.call('HGET', KEYS[6], 'next'), redis.call('HGET', KEYS[6], 'last')
-- Front hint invariant (fronthint.go): every script that puts a member
-- into pending or moves one within it changes the sequence counter.
-- Here: held, from the block hold_part.lua took from the counter (a claim
-- while held returns no generation); else the INCRBY.
if since and nxt and last and tonumber(nxt) + cnt - 1 <= tonumber(last) then
  seq = redis.call('HINCRBY', KEYS[6], 'next', cnt) - cnt - 1
else
  seq = redis.call('INCRBY', KEYS[3], cnt) - cnt
end
local pack, sub = struct.pack, string.sub
local added = 0
for i = 1, #ARGV, 5 do
  local id, kind, due, blob, hist = ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3], ARGV[i + 4]
  seq = seq + 1
  local pos, score = 0, 0
  if kind ~= 'p' then
    score = now
    if due ~= '' then score = tonumber(due) end
    if score <= now or kind == 'u' and score <= now + SKEW then
      score = math.min(score, floor) - 1
    elseif kind ~= 'a' then
      pos = score
    end
    score = math.max(score, 0)
  end
  local s8 = pack('>I8', seq)
  local v = '\2' .. s8 .. sub(blob, 10, 17) .. pack('>I8', pos) .. sub(blob, 26)
  -- One call decides and writes: an ID already present is skipped.
  if redis.call('HSETNX', KEYS[1], id, v) == 1 then
    local m = s8 .. id
    if hist ~= '' then redis.call('HSET', KEYS[7], id, hist) end
    if kind == 'p' then
      redis.call('ZADD', KEYS[5], 0, id)
      redis.call('ZADD', KEYS[8], now_ms(), id)
    else
      redis.call('ZADD', KEYS[2], score, m)
      local key = key_of(v)
      if key ~= '' and pos == 0 then
        redis.call('ZADD', KEYS[4], 0, order_member(key, v, m))
      end
    end
    added = added + 1
  end
end
return added
