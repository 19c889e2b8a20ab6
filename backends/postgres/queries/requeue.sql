-- Requeue: parked entries back to pending as if appended now: due now (one
-- clock reading for all of them), attempts reset, not deferred, last_error
-- and history kept, and a
-- new seq from the column's identity sequence, handed out in the entries'
-- old seq order (r and n are ranked separately, so the order does not
-- depend on the order nextval runs in); the park time (parked_at,
-- migration 008) is cleared. Needs migration 003.
-- $1 ids, $2 the outbox table's qualified name (for pg_get_serial_sequence).
WITH t AS (
    SELECT clock_timestamp() AS now
), r AS (
    SELECT id, seq AS old
    FROM {outbox}
    WHERE id = ANY($1::text[]) AND state = 'parked'
    FOR UPDATE
), n AS (
    SELECT nextval(pg_get_serial_sequence($2, 'seq')) AS seq FROM r
), ranked_r AS (
    SELECT id, row_number() OVER (ORDER BY old) AS rn FROM r
), ranked_n AS (
    SELECT seq, row_number() OVER (ORDER BY seq) AS rn FROM n
)
UPDATE {outbox} AS o
SET state = 'pending', attempts = 0, deferred = false, next_at = t.now, seq = ranked_n.seq,
    parked_at = NULL
FROM t, ranked_r JOIN ranked_n USING (rn)
WHERE o.id = ranked_r.id
