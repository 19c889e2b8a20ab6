-- members.lua: Members (MemberLister; read-only).
--
-- KEYS[1] members hash   KEYS[2] member info hash (the prefix's own slot)
-- Returns {now ms, flat}: the server's TIME and a flat array owner1,
-- record1, info1, ... of the members whose record has not expired, as
-- heartbeat.lua returns them (it deletes the expired ones; this call
-- changes nothing).
local now = now_ms()
local all = redis.call('HGETALL', KEYS[1])
local out = {}
for i = 1, #all, 2 do
  local rec = all[i + 1]
  if #rec >= 9 and u64(rec, 2) > now then
    out[#out + 1] = all[i]
    out[#out + 1] = rec
    out[#out + 1] = redis.call('HGET', KEYS[2], all[i]) or ''
  end
end
return {now, out}
