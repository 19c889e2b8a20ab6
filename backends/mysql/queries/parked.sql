-- Parked: ? after id (bytes), ? limit. Ordered by the bytes of id (as Go
-- compares strings), which utf8mb4_bin with its trailing-space padding
-- does not promise: a sort of the parked rows after the ID.
SELECT {entry_columns}
FROM {outbox} AS o
WHERE o.state = 'parked' AND CAST(o.id AS BINARY) > ?
ORDER BY CAST(o.id AS BINARY)
LIMIT ?
