-- ExportBatch: ? partition, ? partition, ? owner, ? version, ? limit.
-- Fenced and read-only like find_pending_batch.sql: the rows are returned
-- only while the lease is live (no row: the lease is lost or the
-- partition is empty, which export_lease.sql then tells apart). Every row
-- of the partition, pending (due, scheduled, retrying, held back,
-- claimed) or parked, in seq order (the append order; imported entries
-- have negative seqs and come first; a requeued entry has the seq of its
-- requeue): a walk of the primary key (seq) that skips the rows of other
-- partitions. The columns are seq, then {entry_columns}.
SELECT o.seq, {entry_columns}
FROM {outbox} AS o
WHERE o.`partition` = ?
  AND EXISTS (SELECT 1 FROM {lease} AS l
              WHERE l.`partition` = ? AND l.owner = ? AND l.version = ?
                AND l.expires_at > UTC_TIMESTAMP(6))
ORDER BY o.seq
LIMIT ?
