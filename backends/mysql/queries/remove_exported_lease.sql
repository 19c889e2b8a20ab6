-- RemoveExported, first statement of its transaction: ? partition, ?
-- owner, ? version. Reads the lease row with a shared lock, as the relay's
-- fenced writes do: a takeover (which updates the row) waits until the
-- transaction ends, and one that came first makes this read find no row.
SELECT 1 FROM {lease}
WHERE `partition` = ? AND owner = ? AND version = ? AND expires_at > UTC_TIMESTAMP(6)
LOCK IN SHARE MODE
