-- Parked: ? after id, ? limit. Ordered by id, a VARBINARY column: by its
-- bytes, as Go compares strings. A sort of the parked rows after the ID
-- (no index leads with state).
SELECT {entry_columns}
FROM {outbox} AS o
WHERE o.state = 'parked' AND o.id > ?
ORDER BY o.id
LIMIT ?
