-- Whether the lease (? partition, ? owner, ? version) still holds, by the
-- server's clock: Release's whole work (the lease is the claim), and the
-- check fenced writes make when they changed fewer rows than they were
-- given, to tell "unknown or already finished" from "lease lost". A lease
-- that no longer holds never holds again (versions only grow and an
-- expired lease is never renewed), so a check after a write that found it
-- held proves it held during the write.
SELECT COUNT(*) FROM {lease}
WHERE `partition` = ? AND owner = ? AND version = ? AND expires_at > UTC_TIMESTAMP(6)
