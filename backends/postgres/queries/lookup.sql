-- Lookup: $1 id. One row by primary key, pending or parked; no row when
-- the entry does not exist. next_at is the next attempt time (a pending
-- entry's due time), reported only for pending entries. The columns are
-- those of entry_columns.sql.
SELECT {entry_columns}
FROM {outbox} AS o
WHERE o.id = $1
