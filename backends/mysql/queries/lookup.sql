-- Lookup: ? id. One row by the unique index on id, pending or parked; no
-- row when the entry does not exist. The caller compares the ID it read
-- (the collation pads trailing spaces).
SELECT {entry_columns}
FROM {outbox} AS o
WHERE o.id = ?
