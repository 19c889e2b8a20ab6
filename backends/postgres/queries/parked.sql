-- Parked: $1 after id, $2 limit. Ordered by id (the parked index).
SELECT id, partition, topic, key, payload, headers, not_before, attempts,
       last_error, created_at
FROM {outbox}
WHERE state = 'parked' AND id > $1
ORDER BY id
LIMIT $2
