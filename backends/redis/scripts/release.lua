-- release.lua: ReleaseLease (compare-and-delete).
--
-- KEYS[1] lease
-- ARGV[1] token "version:owner"
-- Returns 1 when released, 0 when the token no longer holds the lease. The
-- lease's unfinished entries never left pending: the next holder reads
-- them first, in order.
if not fenced(KEYS[1], ARGV[1]) then return 0 end
redis.call('DEL', KEYS[1])
return 1
