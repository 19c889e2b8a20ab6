-- heartbeat.lua: Heartbeat (Membership: the relays of one outbox).
--
-- KEYS[1] members hash (in the prefix's own slot): owner -> record
-- KEYS[2] member info hash (same slot): owner -> info
-- ARGV[1] owner   ARGV[2] ttl in ms
-- ARGV[3] record body: max partitions (4 bytes), then each partition the
--         member holds (4 bytes each), all big-endian
-- ARGV[4] info body (see membership.go): started, host, version
-- Returns a flat array owner1, record1, info1, owner2, record2, info2, ...
-- of the live members, the caller included, in no particular order (Go
-- sorts them by owner: Lua compares strings by the server's locale, not by
-- bytes); info is '' for a member without one (a build before v0.9).
--
-- A record is: version (1 byte, 1) | expiry in ms by the server's TIME
-- (8 bytes, big-endian) | the body. An info is: version (1 byte, 1) |
-- last heartbeat in ms by the server's TIME (8 bytes) | the info body.
-- The caller's record and info are replaced. A record whose expiry has
-- come (or that is shorter than its header) is not returned and is
-- deleted with its info, at most 100 per call (later calls delete the
-- rest), so one call's writes stay bounded; the hashes are read whole
-- (one record per relay, so they are small). Info fields without a record
-- (left by a crash between builds) are deleted too, as far as that bound
-- allows.
hashes(KEYS[1], KEYS[2])
local now = now_ms()
redis.call('HSET', KEYS[1], ARGV[1], '\1' .. struct.pack('>I8', now + tonumber(ARGV[2])) .. ARGV[3])
redis.call('HSET', KEYS[2], ARGV[1], '\1' .. struct.pack('>I8', now) .. ARGV[4])
local all = redis.call('HGETALL', KEYS[1])
local infos = redis.call('HGETALL', KEYS[2])
local info = {}
for i = 1, #infos, 2 do info[infos[i]] = infos[i + 1] end
local out, dead = {}, {}
for i = 1, #all, 2 do
  local rec = all[i + 1]
  if #rec >= 9 and u64(rec, 2) > now then
    out[#out + 1] = all[i]
    out[#out + 1] = rec
    out[#out + 1] = info[all[i]] or ''
    info[all[i]] = nil
  elseif #dead < 100 then
    dead[#dead + 1] = all[i]
  end
end
if #dead > 0 then
  redis.call('HDEL', KEYS[1], unpack(dead))
  redis.call('HDEL', KEYS[2], unpack(dead))
end
local orphans = {}
for owner in pairs(info) do
  if #orphans + #dead >= 100 then break end
  orphans[#orphans + 1] = owner
end
if #orphans > 0 then redis.call('HDEL', KEYS[2], unpack(orphans)) end
return out
