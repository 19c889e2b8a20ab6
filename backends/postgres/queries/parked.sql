-- Parked: $1 after id, $2 limit. Ordered by the byte order of id (COLLATE
-- "C", whatever the database's collation), which the parked index
-- (id COLLATE "C") WHERE state = 'parked' walks.
SELECT id, partition, topic, key, payload, headers, not_before, attempts,
       last_error, created_at
FROM {outbox}
WHERE state = 'parked' AND id COLLATE "C" > $1
ORDER BY id COLLATE "C"
LIMIT $2
