-- Lookup: $1 id. One row by primary key, pending or parked; no row when
-- the entry does not exist. next_at is the next attempt time (a pending
-- entry's due time), reported only for pending entries.
SELECT partition, topic, key, payload, headers, not_before, attempts,
       last_error, created_at, state = 'parked', next_at
FROM {outbox}
WHERE id = $1
