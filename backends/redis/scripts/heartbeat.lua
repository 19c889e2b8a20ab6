-- heartbeat.lua: Heartbeat (Membership: the relays of one outbox).
--
-- KEYS[1] members hash (in the prefix's own slot): owner -> record
-- ARGV[1] owner   ARGV[2] ttl in ms
-- ARGV[3] record body: max partitions (4 bytes), then each partition the
--         member holds (4 bytes each), all big-endian
-- Returns a flat array owner1, record1, owner2, record2, ... of the live
-- members, the caller included, in no particular order (Go sorts them by
-- owner: Lua compares strings by the server's locale, not by bytes).
--
-- A record is: version (1 byte, 1) | expiry in ms by the server's TIME
-- (8 bytes, big-endian) | the body. The caller's record is replaced by one
-- expiring ttl from now. A record whose expiry has come (or that is
-- shorter than its header) is not returned and is deleted, at most 100
-- per call (later calls delete the rest), so one call's writes stay
-- bounded; the hash is read whole (one record per relay, so it is small).
local now = now_ms()
redis.call('HSET', KEYS[1], ARGV[1], '\1' .. struct.pack('>I8', now + tonumber(ARGV[2])) .. ARGV[3])
local all = redis.call('HGETALL', KEYS[1])
local out, dead = {}, {}
for i = 1, #all, 2 do
  local rec = all[i + 1]
  if #rec >= 9 and u64(rec, 2) > now then
    out[#out + 1] = all[i]
    out[#out + 1] = rec
  elseif #dead < 100 then
    dead[#dead + 1] = all[i]
  end
end
if #dead > 0 then redis.call('HDEL', KEYS[1], unpack(dead)) end
return out
