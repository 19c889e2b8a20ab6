-- export.lua: ExportBatch (fenced, changes no entry).
--
-- KEYS[1] lease   KEYS[2] pending zset   KEYS[3] entries hash
-- KEYS[4] parked zset   KEYS[5] scratch list (deleted before returning)
-- KEYS[6] history hash
-- ARGV[1] token "version:owner"   ARGV[2] limit
-- Returns -1 when the lease is lost, else a flat array id, value, state,
-- score, history, ... of up to limit entries of the partition, pending
-- (state 1, score: the pending score in ms, less PAUSE_BAND for an entry
-- set aside while paused) or parked (state 2, score 0),
-- history the entry's field of KEYS[6] ('' when none), in append
-- order: by the sequence of their pending member (a parked entry: of its
-- value), the order appends, requeues and imports gave them.
--
-- Pending members come in sequence order from SORT ... ALPHA LIMIT with
-- STORE (a member starts with its 8-byte big-endian sequence; with STORE,
-- SORT compares bytes, without it by the locale, which stops at a zero
-- byte), in chunks; the parked entries are read whole and sorted by
-- sequence. Cost: O(pending + parked) per call, in Redis's C code for the
-- pending set.
--
-- Members that name no value are passed over; so is a stray member (of
-- another sequence than its value) when the entry has its own member or
-- is parked; an entry with only a stray member is exported once.
if not fenced(KEYS[1], ARGV[1]) then return -1 end
local limit = tonumber(ARGV[2])
local seen = {}
local parked = {}
for i, id in ipairs(redis.call('ZRANGE', KEYS[4], 0, -1)) do
  local v = redis.call('HGET', KEYS[3], id)
  if v then
    local s = 0
    if #v >= 9 then s = u64(v, 2) end
    parked[#parked + 1] = {s, i, id, v}
  end
end
table.sort(parked, function(a, b)
  if a[1] ~= b[1] then return a[1] < b[1] end
  return a[2] < b[2]
end)
local pend = {}
local off, chunk = 0, limit + 16
while #pend < limit do
  redis.call('SORT', KEYS[2], 'ALPHA', 'LIMIT', off, chunk, 'STORE', KEYS[5])
  local r = redis.call('LRANGE', KEYS[5], 0, -1)
  redis.call('DEL', KEYS[5])
  for _, m in ipairs(r) do
    if #pend >= limit then break end
    local id = string.sub(m, 9)
    local v = not seen[id] and #m >= 8 and redis.call('HGET', KEYS[3], id)
    if v and #v >= 9 and string.sub(v, 2, 9) ~= string.sub(m, 1, 8) and
        (redis.call('ZSCORE', KEYS[2], string.sub(v, 2, 9) .. id) or redis.call('ZSCORE', KEYS[4], id)) then
      v = nil -- a stray member: the entry is pending under its own, or parked
    end
    if v then
      seen[id] = true
      pend[#pend + 1] = {seq_of(m), id, v, redis.call('ZSCORE', KEYS[2], m)}
    end
  end
  if #r < chunk then break end
  off = off + chunk
end
local out, i, j, n = {}, 1, 1, 0
while n < limit do
  local a, b = pend[i], parked[j]
  while b and seen[b[3]] do
    j = j + 1
    b = parked[j]
  end
  if not a and not b then break end
  if a and (not b or a[1] <= b[1]) then
    out[#out + 1] = a[2]
    out[#out + 1] = a[3]
    out[#out + 1] = 1
    out[#out + 1] = string.format('%.0f', unband(tonumber(a[4])))
    out[#out + 1] = redis.call('HGET', KEYS[6], a[2]) or ''
    i = i + 1
  else
    out[#out + 1] = b[3]
    out[#out + 1] = b[4]
    out[#out + 1] = 2
    out[#out + 1] = '0'
    out[#out + 1] = redis.call('HGET', KEYS[6], b[3]) or ''
    j = j + 1
  end
  n = n + 1
end
return out
