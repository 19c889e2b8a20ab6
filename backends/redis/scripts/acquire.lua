-- acquire.lua: AcquireLease (SET NX PX with an owner token).
--
-- KEYS[1] lease   KEYS[2] lease version counter (never expires)
-- KEYS[3] pending zset   KEYS[4] inflight zset of builds before v0.2
-- ARGV[1] owner   ARGV[2] ttl in ms
-- Returns {version, expires_ms} when granted or extended, -2 when another
-- owner holds an unexpired lease, -3 when the lease key holds something
-- other than "version:owner" (written by hand; nothing is changed). A new grant INCRs the version counter, so
-- versions never go backwards. The lease is the claim, so nothing else
-- changes hands; the one exception is an upgrade: earlier builds moved
-- claimed entries to an inflight zset, and a new grant returns any left
-- there to pending with their original score (one ZRANGE of an empty key
-- otherwise).
zsets(KEYS[3], KEYS[4])
local ttl = tonumber(ARGV[2])
local cur = redis.call('GET', KEYS[1])
if cur then
  local c = string.find(cur, ':', 1, true)
  if not c or not tonumber(string.sub(cur, 1, c - 1)) or c == #cur then return -3 end
  local ver, owner = string.sub(cur, 1, c - 1), string.sub(cur, c + 1)
  if owner ~= ARGV[1] then return -2 end
  redis.call('PEXPIRE', KEYS[1], ttl)
  return {tonumber(ver), now_ms() + ttl}
end
local ver = redis.call('INCR', KEYS[2])
redis.call('SET', KEYS[1], ver .. ':' .. ARGV[1], 'PX', ttl)
-- Front hint invariant (fronthint.go): every script that puts a member
-- into pending or moves one within it changes the sequence counter.
-- Here: none needed: restore runs for a new grant, and a hint is only
-- taken under the lease its fetch ran under.
restore(KEYS[4], KEYS[3])
return {ver, now_ms() + ttl}
