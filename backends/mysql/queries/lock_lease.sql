-- MarkSent with the archive, first statement of its transaction: reads the
-- lease row (? partition, ? owner, ? version) with a shared lock, held
-- until the transaction ends, so no takeover interleaves with the copy to
-- the archive and the delete that follow. Returns 1 when the lease holds.
SELECT COUNT(*) FROM {lease}
WHERE `partition` = ? AND owner = ? AND version = ? AND expires_at > UTC_TIMESTAMP(6)
LOCK IN SHARE MODE
