-- claim.lua: FindPendingBatch.
--
-- KEYS[1] lease   KEYS[2] pending zset   KEYS[3] inflight zset
-- KEYS[4] entries hash   KEYS[5] holds hash   KEYS[6] parked zset
-- ARGV[1] token "version:owner"   ARGV[2] limit   ARGV[3] scan budget
-- Returns -1 when the lease is lost, else a flat array id1, value1, id2,
-- value2, ... of claimed entries in (due, append) order.
--
-- Scans ZRANGEBYSCORE pending -inf now in chunks, at most ARGV[3] members.
-- A claimed entry moves to inflight with its score unchanged. An entry held
-- back by an earlier failing entry of its key is skipped; once more than 64
-- were skipped in one call, further held-back entries whose blocker is due
-- later are re-scored to the blocker's score, so they leave the front of
-- the range and cannot starve other keys. A member without a value is
-- removed; a malformed value is parked, rewritten as a valid entry whose
-- payload is the raw value and whose last error says why.
if not fenced(KEYS[1], ARGV[1]) then return -1 end
local limit, budget = tonumber(ARGV[2]), tonumber(ARGV[3])
local nowu = now_us()
local now = math.floor(nowu / 1000)
local out, got, scanned, skipped = {}, 0, 0, 0
local holds = {}
while got < limit and scanned < budget do
  local want = math.min(limit - got + 16, budget - scanned)
  local r = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now, 'WITHSCORES', 'LIMIT', skipped, want)
  if #r == 0 then break end
  for i = 1, #r, 2 do
    if got >= limit then break end
    scanned = scanned + 1
    local m, score = r[i], r[i + 1]
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
        redis.call('HSET', KEYS[4], id, '\1' .. string.sub(m, 1, 8) .. struct.pack('>I8I4I4', nowu, 0, #reason) ..
          reason .. struct.pack('>I4I4I8I4', 0, 0, 0, 0) .. v)
        redis.call('ZREM', KEYS[2], m)
        redis.call('ZADD', KEYS[6], 0, id)
      else
        local blocker = nil
        if key ~= '' then
          local list = holds[key]
          if list == nil then
            list = holds_get(KEYS[5], key)
            holds[key] = list
          end
          local mine = seq_of(m)
          for _, b in ipairs(list) do
            if seq_of(b) < mine then blocker = b break end
          end
        end
        if blocker then
          skipped = skipped + 1
          if skipped > 64 then
            local bs = redis.call('ZSCORE', KEYS[2], blocker)
            if bs and tonumber(bs) > now then
              redis.call('ZADD', KEYS[2], bs, m)
              skipped = skipped - 1
            end
          end
        else
          redis.call('ZREM', KEYS[2], m)
          redis.call('ZADD', KEYS[3], score, m)
          got = got + 1
          out[#out + 1] = id
          out[#out + 1] = v
        end
      end
    end
  end
end
return out
