-- ExportBatch, when it returned no row: ? partition, ? owner, ? version.
-- A row when the lease is live (the partition is empty), none when it is
-- lost.
SELECT 1 FROM {lease}
WHERE `partition` = ? AND owner = ? AND version = ? AND expires_at > UTC_TIMESTAMP(6)
