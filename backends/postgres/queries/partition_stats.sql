-- PartitionStats: $1 the partition count (stored with the outbox).
-- One row per partition 0..$1-1, in order: pending, due, parked, oldest due
-- time (NULL when none is due), and the live lease (owner '' and version 0
-- when the partition is free or its lease expired), the ID of the oldest due
-- entry (the first of the due index's walk of the partition, ties by seq;
-- NULL when none is due) and the number of blocked keys (blocked_heads.sql,
-- whose pass over the pending rows runs only while some entry is failing,
-- deferred or of a paused topic). One statement, so every
-- count and lease is read at one snapshot and one now(); the counts are
-- those of queries/stats.sql, split by partition.
--
-- Plan: the pending counts come from an index-only scan of the due index
-- (partition, next_at, seq) WHERE state = 'pending', already grouped by
-- partition (while the visibility map is current; else the planner reads
-- the table); the parked counts from the parked rows, found through the
-- parked index; the lease rows by primary key. generate_series makes
-- partitions without entries appear (see docs/postgres.md, "Inspecting
-- partitions and entries").
WITH {blocked_heads}, p AS (
    SELECT partition,
           count(*) AS pending,
           count(*) FILTER (WHERE next_at <= now()) AS due,
           min(next_at) FILTER (WHERE next_at <= now() AND isfinite(next_at)) AS oldest
    FROM {outbox}
    WHERE state = 'pending'
    GROUP BY partition
), b AS (
    SELECT partition, count(*) AS blocked
    FROM bk_heads
    GROUP BY partition
), k AS (
    SELECT partition, count(*) AS parked
    FROM {outbox}
    WHERE state = 'parked'
    GROUP BY partition
)
SELECT g.partition,
       coalesce(p.pending, 0), coalesce(p.due, 0), coalesce(k.parked, 0), p.oldest,
       coalesce(l.owner, ''), coalesce(l.version, 0), l.expires_at,
       d.id, coalesce(b.blocked, 0)
FROM generate_series(0, $1::int - 1) AS g(partition)
LEFT JOIN p ON p.partition = g.partition
LEFT JOIN b ON b.partition = g.partition
LEFT JOIN LATERAL (
    SELECT o.id FROM {outbox} AS o
    WHERE o.partition = g.partition AND o.state = 'pending'
      AND o.next_at <= now() AND isfinite(o.next_at)
    ORDER BY o.next_at, o.seq
    LIMIT 1
) AS d ON true
LEFT JOIN k ON k.partition = g.partition
LEFT JOIN {lease} AS l
       ON l.partition = g.partition AND l.owner <> '' AND l.expires_at > now()
ORDER BY g.partition
