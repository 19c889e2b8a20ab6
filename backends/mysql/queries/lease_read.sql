-- AcquireLease, first step: the partition's lease row as last committed,
-- by a consistent (non-locking) read, which never waits for a lock.
-- ? partition. live = 1 while the lease has not expired.
SELECT owner, version, expires_at > UTC_TIMESTAMP(6) AS live
FROM {lease}
WHERE `partition` = ?
