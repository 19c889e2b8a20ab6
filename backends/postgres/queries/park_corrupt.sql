-- FetchBatch's parks of rows it cannot publish as stored (their headers do
-- not decode, their topic is ''): $1 partition, $2 owner, $3 version, then
-- parallel arrays $4 ids, $5 reasons. Fenced like mark_failed.sql, and
-- parks as it does (attempts + 1, the reason as last_error, next_at kept),
-- touching only pending rows, and sets parked_at (migration 008). Returns
-- whether the lease matched and the IDs of the rows it parked, so that
-- FetchBatch reports only those.
WITH l AS MATERIALIZED (
    SELECT 1 FROM {lease}
    WHERE partition = $1 AND owner = $2 AND version = $3 AND expires_at > now()
    FOR SHARE
), u AS (
    UPDATE {outbox} AS o
    SET attempts = least(greatest(o.attempts, 0), 2147483646) + 1,
        last_error = f.error,
        state = 'parked',
        parked_at = now()
    FROM unnest($4::text[], $5::text[]) AS f(id, error)
    WHERE o.id = f.id AND o.partition = $1 AND o.state = 'pending'
      AND EXISTS (SELECT 1 FROM l)
    RETURNING o.id
)
SELECT EXISTS (SELECT 1 FROM l), coalesce((SELECT array_agg(id) FROM u), '{}'::text[])
