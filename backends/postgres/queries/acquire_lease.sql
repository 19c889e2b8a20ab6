-- AcquireLease: $1 partition, $2 owner, $3 ttl in microseconds.
-- A free (owner = '') or expired lease is taken with version + 1; the
-- holder's own unexpired lease is extended and keeps its version; another
-- owner's unexpired lease returns no row (ErrLeaseHeld).
INSERT INTO {lease} AS l (partition, owner, version, expires_at)
VALUES ($1, $2, 1, now() + $3::bigint * interval '1 microsecond')
ON CONFLICT (partition) DO UPDATE
SET owner = EXCLUDED.owner,
    version = CASE WHEN l.owner = EXCLUDED.owner AND l.expires_at > now()
                   THEN l.version ELSE l.version + 1 END,
    expires_at = EXCLUDED.expires_at
WHERE l.owner = EXCLUDED.owner OR l.expires_at <= now()
RETURNING l.version, l.expires_at
