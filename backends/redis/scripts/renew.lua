-- renew.lua: RenewLease (compare-and-renew).
--
-- KEYS[1] lease
-- ARGV[1] token "version:owner"   ARGV[2] ttl in ms
-- Returns the new expiry in ms, or -1 when the lease is not held by the
-- token (expired, taken over or released).
if not fenced(KEYS[1], ARGV[1]) then return -1 end
redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[2]))
return now_ms() + tonumber(ARGV[2])
