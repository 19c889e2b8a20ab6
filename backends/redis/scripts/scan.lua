-- scan.lua: one chunk of a partition's pending entries, for Lister
-- (read-only).
--
-- KEYS[1] pending zset   KEYS[2] entries hash   KEYS[3] history hash
-- ARGV[1] start: the rank of the first member to read
-- ARGV[2] count: how many members to read (the work of one call)
-- Returns {now ms, n, flat}: the server's TIME, the number of members
-- read (below count: the end was reached) and, per member of ranks
-- start .. start+count-1 whose value is well formed and of its sequence
-- (others are left for the claim to repair), the nine fields id, score
-- (less PAUSE_BAND for an entry set aside while paused),
-- sequence, position ms, attempts, created-at µs, deferred (1 or 0),
-- key, topic. Neither payloads nor errors are returned; Go reads the
-- values of the entries it lists.
local now = now_ms()
local start, count = tonumber(ARGV[1]), tonumber(ARGV[2])
local r = redis.call('ZRANGE', KEYS[1], start, start + count - 1, 'WITHSCORES')
local out = {}
if #r == 0 then return {now, 0, out} end
local ids = {}
for i = 1, #r, 2 do ids[#ids + 1] = string.sub(r[i], 9) end
local vals = redis.call('HMGET', KEYS[2], unpack(ids))
local hs = redis.call('HMGET', KEYS[3], unpack(ids))
for j = 1, #ids do
  local m, v = r[2 * j - 1], vals[j]
  if v and string.byte(v, 1) ~= 3 and string.sub(v, 2, 9) == string.sub(m, 1, 8) then
    v = as_v2(v)
    local p = parse(v)
    if not p.why then
      local d = 0
      if history_flags(hs[j] or nil) % 2 == 1 then d = 1 end
      out[#out + 1] = ids[j]
      out[#out + 1] = unband(tonumber(r[2 * j]))
      out[#out + 1] = seq_of(m)
      out[#out + 1] = u64(v, 18)
      out[#out + 1] = attempts_of(v)
      out[#out + 1] = u64(v, 10)
      out[#out + 1] = d
      out[#out + 1] = p.key
      out[#out + 1] = p.topic
    end
  end
end
return {now, #r / 2, out}
