-- release_claims.lua: Release (fenced).
--
-- KEYS[1] lease
-- ARGV[1] token "version:owner"
-- Returns -1 when the lease is lost, else 0. The lease is the claim:
-- FindPendingBatch leaves the entries it returns in pending, unchanged, so
-- releasing them changes nothing; the next read of the partition returns
-- them again, in order.
if not fenced(KEYS[1], ARGV[1]) then return -1 end
return 0
