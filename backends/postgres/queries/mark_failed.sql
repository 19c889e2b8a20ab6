-- MarkFailed: $1 partition, $2 owner, $3 version, then parallel arrays
-- $4 ids, $5 errors, $6 delays in microseconds, $7 park flags. One fenced
-- statement (see mark_sent.sql). Parked and sent (deleted) rows are never
-- touched. The due time is computed here, by the database's clock:
-- now() + delay; a negative delay puts it in the past, before entries
-- appended after that time. attempts counts on from 0 when a hand-made
-- UPDATE made it negative, and stops at the integer maximum instead of
-- failing the statement.
WITH l AS MATERIALIZED (
    SELECT 1 FROM {lease}
    WHERE partition = $1 AND owner = $2 AND version = $3 AND expires_at > now()
    FOR SHARE
), u AS (
    UPDATE {outbox} AS o
    SET attempts = least(greatest(o.attempts, 0), 2147483646) + 1,
        last_error = f.error,
        next_at = CASE WHEN f.park THEN o.next_at
                       ELSE now() + f.delay_us * interval '1 microsecond' END,
        state = CASE WHEN f.park THEN 'parked' ELSE 'pending' END
    FROM unnest($4::text[], $5::text[], $6::bigint[], $7::boolean[])
        AS f(id, error, delay_us, park)
    WHERE o.id = f.id AND o.partition = $1 AND o.state = 'pending'
      AND EXISTS (SELECT 1 FROM l)
    RETURNING o.id
)
SELECT EXISTS (SELECT 1 FROM l), (SELECT count(*) FROM u)
