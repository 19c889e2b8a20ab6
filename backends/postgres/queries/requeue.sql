-- Requeue: parked entries back to pending, due now, attempts reset,
-- last_error kept. $1 ids.
UPDATE {outbox}
SET state = 'pending', attempts = 0, next_at = clock_timestamp()
WHERE id = ANY($1::text[]) AND state = 'parked'
