-- quarantine.lua: parks entries a claim returned whose stored value the Go
-- decoder refused (fenced; see claim.lua's fast path).
--
-- KEYS[1] lease   KEYS[2] pending zset   KEYS[3] entries hash
-- KEYS[4] parked zset   KEYS[5] parked-at zset
-- ARGV[1] token "version:owner", then pairs: the pending member the claim
-- returned the entry under, and its ID
-- Returns -1 when the lease is lost (nothing changed), else {parked,
-- sound}: parked is a flat array id, key, topic, reason of each entry
-- parked here, quarantined as claim.lua parks a corrupt value (see
-- park_corrupt in lib.lua); sound lists the IDs whose value parse finds
-- well formed, with a topic (left as they are: the caller parks them with
-- a reason of its own). An entry no longer pending under that member, or
-- whose value is gone or not of that sequence, is neither.
if not fenced(KEYS[1], ARGV[1]) then return -1 end
zsets(KEYS[2], KEYS[4])
hashes(KEYS[3])
local nowu = now_us()
local now = math.floor(nowu / 1000)
local parked, sound = {}, {}
for i = 2, #ARGV - 1, 2 do
  local m, id = ARGV[i], ARGV[i + 1]
  local v = redis.call('HGET', KEYS[3], id)
  if v and #v >= 9 and string.sub(v, 2, 9) == string.sub(m, 1, 8) and redis.call('ZSCORE', KEYS[2], m) then
    local p = string.byte(v, 1) ~= 3 and parse(v)
    if p and (p.why or p.topic == '') then
      local reason = park_corrupt(KEYS[2], KEYS[3], KEYS[4], id, m, v, p, nowu, now, KEYS[5])
      for _, f in ipairs({id, p.key or '', p.topic or '', reason}) do parked[#parked + 1] = f end
    elseif p then
      sound[#sound + 1] = id
    end
  end
end
return {parked, sound}
