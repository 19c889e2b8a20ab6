-- scan.lua: one chunk of a partition's pending entries, for Lister
-- (read-only).
--
-- KEYS[1] pending zset   KEYS[2] entries hash   KEYS[3] history hash
-- ARGV[1] start: the rank of the first member to read
-- ARGV[2] count: how many members to read (the work of one call)
-- Returns {now ms, n, flat}: the server's TIME, the number of members
-- read (below count: the end was reached) and, per member of ranks
-- start .. start+count-1 whose value is of its sequence and long enough
-- to hold its key and topic (others are left for the claim to repair or
-- park; Go decodes the values it lists), the six fields id, score
-- (less PAUSE_BAND for an entry set aside while paused), header (the
-- value's bytes 2-29: sequence, created-at µs, position ms, attempts, as
-- encoding.go lays them out), deferred (1 or 0), key, topic. Neither
-- payloads nor errors are returned; Go reads the values of the entries it
-- lists.
local now = now_ms()
local start, count = tonumber(ARGV[1]), tonumber(ARGV[2])
local r = redis.call('ZRANGE', KEYS[1], start, start + count - 1, 'WITHSCORES')
local out = {}
if #r == 0 then return {now, 0, out} end
local ids = {}
for i = 1, #r, 2 do ids[#ids + 1] = string.sub(r[i], 9) end
local vals = redis.call('HMGET', KEYS[2], unpack(ids))
local hs = redis.call('HMGET', KEYS[3], unpack(ids))
-- fields reads a format 2 value's key and topic by their offsets (the
-- claim parses every value it hands out; a listing only needs these),
-- nil when the value is too short to hold them.
local function fields(v)
  local n = #v
  if n < 37 then return nil end
  local ka = 34 + u32(v, 30)
  if n < ka + 3 then return nil end
  local ta = ka + 4 + u32(v, ka)
  if n < ta + 3 then return nil end
  local tl = u32(v, ta)
  if n < ta + 3 + tl then return nil end
  return string.sub(v, ka + 4, ta - 1), string.sub(v, ta + 4, ta + 3 + tl)
end

local sub = string.sub
for j = 1, #ids do
  local m, v = r[2 * j - 1], vals[j]
  if v and sub(v, 2, 9) == sub(m, 1, 8) then
    local key, topic
    if string.byte(v, 1) == 1 then
      v = as_v2(v)
    end
    if string.byte(v, 1) == 2 then key, topic = fields(v) end
    if key then
      local d = 0
      if history_flags(hs[j] or nil) % 2 == 1 then d = 1 end
      local o = #out
      out[o + 1] = ids[j]
      out[o + 2] = unband(tonumber(r[2 * j]))
      out[o + 3] = sub(v, 2, 29)
      out[o + 4] = d
      out[o + 5] = key
      out[o + 6] = topic
    end
  end
end
return {now, #r / 2, out}
