-- release.lua: ReleaseLease (compare-and-delete).
--
-- KEYS[1] lease   KEYS[2] pending zset   KEYS[3] inflight zset
-- ARGV[1] token "version:owner"
-- Returns 1 when released (and the lease's claims went back to pending with
-- their original scores), 0 when the token no longer holds the lease.
if not fenced(KEYS[1], ARGV[1]) then return 0 end
redis.call('DEL', KEYS[1])
restore(KEYS[3], KEYS[2])
return 1
