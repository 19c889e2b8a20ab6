-- MarkFailed: $1 partition, $2 owner, $3 version, then parallel arrays
-- $4 ids, $5 errors, $6 delays in microseconds, $7 park flags, $8
-- deferred flags. One fenced statement (see mark_sent.sql). Parked and
-- sent (deleted) rows are never touched. The due time is computed here, by
-- the database's clock: now() + delay; a negative delay puts it in the
-- past, before entries appended after that time. attempts counts on from
-- 0 when a hand-made UPDATE made it negative, and stops at the integer
-- maximum instead of failing the statement.
--
-- A failure appends {"at": now() in UTC, "error", "owner": $2} to history
-- and keeps its last {max_history} elements (a JSON path slice: fewer are
-- kept as they are). A deferred failure (never park: the Backend rejects
-- both) only sets next_at and deferred: attempts, last_error and history
-- stay. Any other failure clears deferred (an attempted entry holds its
-- key back by its attempts; a parked one holds back nothing). A park sets
-- parked_at to now() (migration 008); the row was pending, so it was NULL.
WITH l AS MATERIALIZED (
    SELECT 1 FROM {lease}
    WHERE partition = $1 AND owner = $2 AND version = $3 AND expires_at > now()
    FOR SHARE
), u AS (
    UPDATE {outbox} AS o
    SET attempts = CASE WHEN f.deferred THEN o.attempts
                        ELSE least(greatest(o.attempts, 0), 2147483646) + 1 END,
        last_error = CASE WHEN f.deferred THEN o.last_error ELSE f.error END,
        history = CASE WHEN f.deferred THEN o.history
                       ELSE jsonb_path_query_array(
                                coalesce(o.history, '[]'::jsonb) || jsonb_build_array(jsonb_build_object(
                                    'at', to_char(now() AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'),
                                    'error', f.error,
                                    'owner', $2::text)),
                                '$[last - {max_history_minus_1} to last]') END,
        deferred = f.deferred,
        next_at = CASE WHEN f.park THEN o.next_at
                       ELSE now() + f.delay_us * interval '1 microsecond' END,
        state = CASE WHEN f.park THEN 'parked' ELSE 'pending' END,
        parked_at = CASE WHEN f.park THEN now() END
    FROM unnest($4::text[], $5::text[], $6::bigint[], $7::boolean[], $8::boolean[])
        AS f(id, error, delay_us, park, deferred)
    WHERE o.id = f.id AND o.partition = $1 AND o.state = 'pending'
      AND EXISTS (SELECT 1 FROM l)
    RETURNING o.id
)
SELECT EXISTS (SELECT 1 FROM l), (SELECT count(*) FROM u)
