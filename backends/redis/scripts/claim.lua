-- claim.lua: FindPendingBatch.
--
-- KEYS[1] lease   KEYS[2] pending zset   KEYS[3] inflight zset
-- KEYS[4] entries hash   KEYS[5] key-order zset   KEYS[6] parked zset
-- ARGV[1] token "version:owner"   ARGV[2] limit   ARGV[3] scan budget
-- Returns -1 when the lease is lost, else a flat array id1, value1, id2,
-- value2, ... of claimed entries in (due, append) order.
--
-- Scans ZRANGEBYSCORE pending -inf now in chunks, looking at no more than
-- ARGV[3] members in all (re-scored and re-visited members count, and so
-- does every unfinished claim that eligible steps over). A claimed entry
-- moves to inflight with its score unchanged.
--
-- Per-key order comes from the key-order set alone, never from scores: an
-- entry with a non-empty key is claimed only when every entry before it in
-- its key's order is claimed (earlier in this call, or by an earlier call
-- and not finished yet) and was never attempted. So a failing entry holds
-- back the rest of its key, even within one batch, and a pending entry
-- that is not claimed (held back itself, or not due) holds back everything
-- after it. A held-back entry whose blocker (the first entry before it
-- that is still pending) has a later score is re-scored to that score: it
-- cannot be claimed before its blocker, so this never delays it, and it
-- leaves the front of the range, so a crowd behind one failing entry
-- cannot starve other keys. Other held-back entries are skipped.
--
-- Repairs, none expected in normal operation: a member without a value is
-- removed; a malformed value is parked, rewritten as a valid entry whose
-- payload is the raw value and whose last error says why; a key-order
-- member whose entry is neither pending nor claimed is removed when it
-- would block; a keyed entry missing from the key order is added; a
-- format 1 entry is converted to format 2 and added to the key order.
if not fenced(KEYS[1], ARGV[1]) then return -1 end
local limit, budget = tonumber(ARGV[2]), tonumber(ARGV[3])
local nowu = now_us()
local now = math.floor(nowu / 1000)
local out, got, scanned, skipped = {}, 0, 0, 0
-- open[key]: the key-order member up to which every entry of the key is
-- claimed and was never attempted (entries claimed in this call, and
-- unfinished claims of earlier calls walked over); stop[key]: an attempted
-- entry of the key is claimed, so the rest of the key is held back;
-- nxt[key]: the member right after open[key], when the last lookup saw it
-- (saves a lookup for the next entry of a key in the same batch; dropped
-- whenever eligible or a conversion changes the key's order or open[key]).
local open, stop, nxt = {}, {}, {}

-- eligible reports whether the entry with key-order member km may be
-- claimed now. It walks the key's order from open[key]: claimed,
-- never-attempted entries are stepped over (each step counts against the
-- scan budget), stale members are removed. When km is held back it also
-- returns the pending score of its blocker, the first entry before it that
-- is still pending (nil when the blocker is claimed and attempted).
local function eligible(key, pfx, km)
  if stop[key] then return false end
  if nxt[key] == km then
    nxt[key] = nil
    return true
  end
  nxt[key] = nil
  local hi = '[' .. pfx .. HIGH
  local repaired = false
  while not stop[key] do
    local lo = '[' .. pfx
    if open[key] then lo = '(' .. open[key] end
    local r = redis.call('ZRANGEBYLEX', KEYS[5], lo, hi, 'LIMIT', 0, 2)
    local b = r[1]
    if b == km then
      nxt[key] = r[2]
      return true
    end
    if not redis.call('ZSCORE', KEYS[5], km) then
      -- The entry is missing from its key's order (only possible after
      -- manual changes): put it back at its position; claim it only if
      -- that makes it the first open entry.
      if repaired then return false end
      redis.call('ZADD', KEYS[5], 0, km)
      repaired = true
    elseif not b then
      return false -- km is behind open[key]: cannot happen, be safe
    else
      -- b is before km.
      local bm = string.sub(b, #pfx + 9)
      local s = redis.call('ZSCORE', KEYS[2], bm)
      if s then return false, tonumber(s) end
      if scanned >= budget then return false end
      scanned = scanned + 1
      if redis.call('ZSCORE', KEYS[3], bm) then
        local bv = redis.call('HGET', KEYS[4], string.sub(bm, 9))
        if bv and attempts_of((as_v2(bv))) == 0 then
          open[key] = b -- claimed earlier, never attempted: no hold-back
        else
          stop[key] = true
        end
      else
        redis.call('ZREM', KEYS[5], b) -- stale: its entry is gone or parked
      end
    end
  end
  return false
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
    local v = redis.call('HGET', KEYS[4], id)
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
        redis.call('HSET', KEYS[4], id, '\2' .. string.sub(m, 1, 8) .. struct.pack('>I8I8I4I4', nowu, now, 0, #reason) ..
          reason .. struct.pack('>I4I4I8I4', 0, 0, 0, 0) .. v)
        redis.call('ZREM', KEYS[2], m)
        redis.call('ZADD', KEYS[6], 0, id)
      else
        local converted
        v, converted = as_v2(v)
        local km, pfx
        if key ~= '' then
          pfx = key_prefix(key)
          km = pfx .. string.sub(v, 18, 25) .. m
          if converted then
            redis.call('ZADD', KEYS[5], 0, km)
            nxt[key] = nil
          end
        end
        if converted then redis.call('HSET', KEYS[4], id, v) end
        local ok, bs = true, nil
        if km then ok, bs = eligible(key, pfx, km) end
        if ok then
          redis.call('ZREM', KEYS[2], m)
          redis.call('ZADD', KEYS[3], score, m)
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
