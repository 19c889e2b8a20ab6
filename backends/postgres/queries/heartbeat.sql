-- Heartbeat: $1 owner, $2 partitions, $3 max_partitions, $4 ttl in
-- microseconds, $5 host, $6 version, $7 started (NULL: unknown). One statement: it upserts the caller's record with an
-- expiry by the database's clock, deletes the expired records of other
-- relays, and returns the live records, the caller's included, sorted by
-- owner (byte order, as Go compares strings).
--
-- The statement's snapshot does not see its own writes: the caller's
-- record comes from the upsert's RETURNING, the others from the table as
-- the statement found it, filtered by expiry (so records it deletes are
-- not returned either).
--
-- The delete locks the records it removes with SKIP LOCKED and runs only
-- after the upsert (the EXISTS on up gates it), so a heartbeat never waits
-- while holding a lock another heartbeat needs: a record that is being
-- renewed, or deleted by another heartbeat, is left alone, and the upsert
-- waits only for a heartbeat that is deleting the caller's expired record
-- (then it inserts the record anew).
WITH up AS (
    INSERT INTO {member} AS m (owner, partitions, max_partitions, expires_at,
                               host, version, started, renewed_at)
    VALUES ($1, $2::integer[], $3, now() + $4::bigint * interval '1 microsecond',
            $5, $6, $7, now())
    ON CONFLICT (owner) DO UPDATE
    SET partitions = EXCLUDED.partitions,
        max_partitions = EXCLUDED.max_partitions,
        expires_at = EXCLUDED.expires_at,
        host = EXCLUDED.host,
        version = EXCLUDED.version,
        started = EXCLUDED.started,
        renewed_at = EXCLUDED.renewed_at
    RETURNING m.owner, m.partitions, m.max_partitions, m.expires_at,
              m.host, m.version, m.started, m.renewed_at
), expired AS (
    DELETE FROM {member}
    WHERE EXISTS (SELECT 1 FROM up)
      AND owner IN (SELECT owner FROM {member}
                    WHERE expires_at <= now() AND owner <> $1
                    FOR UPDATE SKIP LOCKED)
)
SELECT owner, partitions, max_partitions, expires_at, host, version, started, renewed_at
FROM (SELECT owner, partitions, max_partitions, expires_at, host, version, started, renewed_at FROM up
      UNION ALL
      SELECT owner, partitions, max_partitions, expires_at, host, version, started, renewed_at FROM {member}
      WHERE expires_at > now() AND owner <> $1) AS live
ORDER BY owner COLLATE "C"
