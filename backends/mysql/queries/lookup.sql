-- Lookup: ? id. One row by the unique index on id, pending or parked; no
-- row when the entry does not exist.
SELECT {entry_columns}
FROM {outbox} AS o
WHERE o.id = ?
