-- purge_parked.lua: PurgeParked, one partition (not fenced: run by the
-- relay holding partition 0's lease, or by an operator).
--
-- KEYS[1] entries hash   KEYS[2] pending zset   KEYS[3] parked zset
-- KEYS[4] key-order zset   KEYS[5] sequence counter   KEYS[6] history hash
-- KEYS[7] parked-at zset (parked entry ID -> park time, ms)
-- ARGV[1] park time bound, ms: entries parked before it are removed
-- ARGV[2] limit: at most this many entries are removed
-- Returns {ids, more}: ids are the removed entries, oldest park first;
-- more is 1 when entries parked before ARGV[1] remain, else 0.
--
-- Each entry is removed as Cancel removes it (cancel_entry in lib.lua):
-- its value, its parked member, its park time and its history. A park
-- time whose entry is no longer parked (an entry removed by a path that
-- left its park time behind) is dropped without counting against the
-- limit. Parked entries without a park time (parked by a build before
-- parked-at existed) are first given one: the current time, so they are
-- removed a retention after this call rather than at once; that pass
-- runs only while the parked set has more members than KEYS[7], reading
-- the parked set in pages of 1000.
hashes(KEYS[1], KEYS[6])
zsets(KEYS[2], KEYS[3], KEYS[4], KEYS[7])
local now = now_ms()
if redis.call('ZCARD', KEYS[3]) > redis.call('ZCARD', KEYS[7]) then
  local off = 0
  while true do
    local page = redis.call('ZRANGE', KEYS[3], off, off + 999)
    for _, id in ipairs(page) do
      if not redis.call('ZSCORE', KEYS[7], id) then redis.call('ZADD', KEYS[7], now, id) end
    end
    if #page < 1000 then break end
    off = off + 1000
  end
end
local bound, limit = '(' .. ARGV[1], tonumber(ARGV[2])
local out = {}
while #out < limit do
  local r = redis.call('ZRANGEBYSCORE', KEYS[7], '-inf', bound, 'LIMIT', 0, limit - #out)
  if #r == 0 then break end
  for _, id in ipairs(r) do
    if redis.call('ZSCORE', KEYS[3], id) then
      cancel_entry(KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7], id)
      out[#out + 1] = id
    else
      redis.call('ZREM', KEYS[7], id)
    end
  end
end
local more = 0
if #redis.call('ZRANGEBYSCORE', KEYS[7], '-inf', bound, 'LIMIT', 0, 1) > 0 then more = 1 end
return {out, more}
