-- claim.lua: FindPendingBatch.
--
-- KEYS[1] lease   KEYS[2] pending zset   KEYS[3] entries hash
-- KEYS[4] key-order zset   KEYS[5] parked zset
-- ARGV[1] token "version:owner"   ARGV[2] limit   ARGV[3] scan budget
-- Returns -1 when the lease is lost, else a flat array id1, value1, id2,
-- value2, ... of entries in (due, append) order.
--
-- The lease is the claim: only its holder reads the partition, so the
-- entries returned stay in pending, unchanged, until the holder finishes
-- them (MarkSent, MarkFailed) or the next holder reads them again. Nothing
-- is written per returned entry.
--
-- Scans ZRANGEBYSCORE pending -inf now in chunks, looking at no more than
-- ARGV[3] members in all (re-scored members count, and so do the members
-- eligible walks over).
--
-- Per-key order comes from the key-order set alone, never from scores: an
-- entry with a non-empty key is returned only when every entry before it
-- in its key's order was returned earlier in this call and was never
-- attempted. So a failing entry holds back the rest of its key, even
-- within one batch, and a pending entry that is not returned (held back
-- itself, or not due) holds back everything after it. A held-back entry
-- whose blocker (the first entry before it that is not returned) has a
-- later score is re-scored to that score: it cannot be returned before its
-- blocker, so this never delays it, and it leaves the front of the range,
-- so a crowd behind one failing entry cannot starve other keys. Other
-- held-back entries are skipped.
--
-- Repairs, none expected in normal operation: a member without a value is
-- removed; a malformed value is parked, rewritten as a valid entry whose
-- payload is the raw value and whose last error says why; a key-order
-- member whose entry is not pending is removed when it would block; a
-- keyed entry missing from the key order is added; a format 1 entry is
-- converted to format 2 and added to the key order.
if not fenced(KEYS[1], ARGV[1]) then return -1 end
local limit, budget = tonumber(ARGV[2]), tonumber(ARGV[3])
local nowu = now_us()
local now = math.floor(nowu / 1000)
local out, got, scanned, skipped = {}, 0, 0, 0
-- open[key]: the key-order member of the last entry of the key returned
-- in this call (every entry of the key up to it was returned, none of
-- them attempted); stop[key]: an attempted entry of the key was returned,
-- so the rest of the key is held back; nxt[key]: the member right after
-- open[key], when the last lookup saw it (saves a lookup for the next
-- entry of a key in the same batch; dropped whenever eligible or a
-- conversion changes the key's order or open[key]).
local open, stop, nxt = {}, {}, {}

-- precedes reports whether key-order member a comes before b, both of
-- one key, whose position starts at offset at. (Lua's string comparison
-- follows the server's collation locale, not bytes, so it is not used.)
local function precedes(a, b, at)
  local pa, pb = u64(a, at), u64(b, at)
  if pa ~= pb then return pa < pb end
  return u64(a, at + 8) < u64(b, at + 8)
end

-- eligible reports whether the entry with key-order member km may be
-- returned now: whether it is the first member of its key after open[key].
-- Stale members met on the way are removed. When km is held back it also
-- returns the pending score of its blocker (nil when the blocker is an
-- attempted entry returned in this call).
local function eligible(key, pfx, km)
  if stop[key] then return false end
  if nxt[key] == km then
    nxt[key] = nil
    return true
  end
  nxt[key] = nil
  local hi = '[' .. pfx .. HIGH
  local repaired = false
  while true do
    local lo = '[' .. pfx
    if open[key] then lo = '(' .. open[key] end
    local r = redis.call('ZRANGEBYLEX', KEYS[4], lo, hi, 'LIMIT', 0, 2)
    local b = r[1]
    if b == km then
      nxt[key] = r[2]
      return true
    end
    if not b or not precedes(b, km, #pfx + 1) then
      -- km is missing from its key's order (only possible after manual
      -- changes): put it back at its place; return it only if that makes
      -- it the first open entry.
      if repaired then return false end
      redis.call('ZADD', KEYS[4], 0, km)
      repaired = true
    else
      -- b is before km and was not returned in this call.
      local s = redis.call('ZSCORE', KEYS[2], string.sub(b, #pfx + 9))
      if s then return false, tonumber(s) end
      if scanned >= budget then return false end
      scanned = scanned + 1
      redis.call('ZREM', KEYS[4], b) -- stale: its entry is gone or parked
    end
  end
end

while got < limit and scanned < budget do
  local want = math.min(limit - got + 16, budget - scanned)
  local r = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now, 'WITHSCORES', 'LIMIT', skipped, want)
  if #r == 0 then break end
  for i = 1, #r, 2 do
    if got >= limit or scanned >= budget then break end
    scanned = scanned + 1
    local m, score = r[i], tonumber(r[i + 1])
    local id = string.sub(m, 9)
    local v = redis.call('HGET', KEYS[3], id)
    if not v then
      redis.call('ZREM', KEYS[2], m)
    else
      local key, why = parse(v)
      if key and string.sub(v, 2, 9) ~= string.sub(m, 1, 8) then
        key, why = nil, 'sequence in the value does not match its pending member'
      end
      if not key then
        local reason = 'redisoutbox: corrupt stored entry, parked by FindPendingBatch: ' .. why ..
          '; the payload holds the raw stored value'
        redis.call('HSET', KEYS[3], id, '\2' .. string.sub(m, 1, 8) .. struct.pack('>I8I8I4I4', nowu, now, 0, #reason) ..
          reason .. struct.pack('>I4I4I8I4', 0, 0, 0, 0) .. v)
        redis.call('ZREM', KEYS[2], m)
        redis.call('ZADD', KEYS[5], 0, id)
      else
        local converted
        v, converted = as_v2(v)
        local km, pfx
        if key ~= '' then
          pfx = key_prefix(key)
          km = pfx .. string.sub(v, 18, 25) .. m
          if converted then
            redis.call('ZADD', KEYS[4], 0, km)
            nxt[key] = nil
          end
        end
        if converted then redis.call('HSET', KEYS[3], id, v) end
        local ok, bs = true, nil
        if km then ok, bs = eligible(key, pfx, km) end
        if ok then
          skipped = skipped + 1 -- it stays in pending, in front of the next chunk
          if km then
            open[key] = km
            if attempts_of(v) > 0 then stop[key] = true end
          end
          got = got + 1
          out[#out + 1] = id
          out[#out + 1] = v
        elseif bs and bs > score then
          redis.call('ZADD', KEYS[2], bs, m)
        else
          skipped = skipped + 1
        end
      end
    end
  end
end
return out
