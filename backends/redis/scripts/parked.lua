-- parked.lua: Parked, one page of one partition (read-only).
--
-- KEYS[1] parked zset (all scores 0)   KEYS[2] entries hash
-- ARGV[1] list after this ID ('' = from the start)   ARGV[2] limit
-- Returns a flat array id1, value1, ... ordered by ID (byte order).
local min = '-'
if ARGV[1] ~= '' then min = '(' .. ARGV[1] end
local ids = redis.call('ZRANGEBYLEX', KEYS[1], min, '+', 'LIMIT', 0, tonumber(ARGV[2]))
local out = {}
for _, id in ipairs(ids) do
  local v = redis.call('HGET', KEYS[2], id)
  if v then
    out[#out + 1] = id
    out[#out + 1] = v
  end
end
return out
