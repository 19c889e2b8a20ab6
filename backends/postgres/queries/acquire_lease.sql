-- AcquireLease: $1 partition, $2 owner, $3 ttl in microseconds.
-- A free (owner = '') or expired lease is taken with version + 1; the
-- holder's own unexpired lease is extended and keeps its version; another
-- owner's unexpired lease returns no row (ErrLeaseHeld).
--
-- A plain UPDATE: PostgreSQL checks its WHERE against the row version the
-- statement sees before it locks the row, so when another owner holds the
-- lease the UPDATE skips the row without locking it, and a standby relay's
-- failing acquire never waits for (or delays) the holder's fenced writes,
-- which read the row FOR SHARE. (An INSERT ... ON CONFLICT DO UPDATE ...
-- WHERE locks the conflicting row even when its WHERE is false.) When the
-- condition holds, the UPDATE locks the row and checks it again on the
-- newest version, so two acquires never both win.
--
-- The lease rows are created by migration 004; the INSERT recreates a
-- missing one (removed by hand) and runs only when the row is not there at
-- all, so it takes no lock on an existing row either.
WITH u AS (
    UPDATE {lease} AS l
    SET owner = $2,
        version = CASE WHEN l.owner = $2 AND l.expires_at > now()
                       THEN l.version ELSE l.version + 1 END,
        expires_at = now() + $3::bigint * interval '1 microsecond'
    WHERE l.partition = $1
      AND (l.owner = '' OR l.owner = $2 OR l.expires_at <= now())
    RETURNING l.version, l.expires_at
), i AS (
    INSERT INTO {lease} (partition, owner, version, expires_at)
    SELECT $1, $2, 1, now() + $3::bigint * interval '1 microsecond'
    WHERE NOT EXISTS (SELECT 1 FROM {lease} WHERE partition = $1)
    ON CONFLICT (partition) DO NOTHING
    RETURNING version, expires_at
)
SELECT version, expires_at FROM u
UNION ALL
SELECT version, expires_at FROM i
