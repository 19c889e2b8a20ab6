-- release_claims.lua: Release (fenced).
--
-- KEYS[1] lease   KEYS[2] pending zset   KEYS[3] inflight zset
-- KEYS[4] entries hash
-- ARGV[1] token "version:owner"   ARGV[2..] entry IDs
-- Returns -1 when the lease is lost, else the number of entries returned to
-- pending with their original score (attempts, error and order unchanged).
-- IDs that are not claimed are ignored.
if not fenced(KEYS[1], ARGV[1]) then return -1 end
local n = 0
for i = 2, #ARGV do
  local v = redis.call('HGET', KEYS[4], ARGV[i])
  if v then
    local m = member(v, ARGV[i])
    local s = redis.call('ZSCORE', KEYS[3], m)
    if s then
      redis.call('ZREM', KEYS[3], m)
      redis.call('ZADD', KEYS[2], s, m)
      n = n + 1
    end
  end
end
return n
