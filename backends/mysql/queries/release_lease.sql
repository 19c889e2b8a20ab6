-- ReleaseLease: compare-and-free. ? partition, ? owner, ? version. The
-- owner is compared as bytes (the column's collation pads spaces). The
-- row stays (owner '' = free) so the next AcquireLease continues from its
-- version. Nothing matches a lease that expired, was taken over or was
-- released: a no-op.
UPDATE {lease}
SET owner = '', expires_at = UTC_TIMESTAMP(6)
WHERE `partition` = ? AND CAST(owner AS BINARY) = CAST(? AS BINARY) AND version = ?
  AND expires_at > UTC_TIMESTAMP(6)
