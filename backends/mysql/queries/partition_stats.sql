-- PartitionStats: one row per partition that has entries or a lease row,
-- in order: pending, due, parked, the oldest due
-- time (microseconds, NULL when none is due), the ID of the oldest due
-- entry (the first of the due index's walk of the partition, ties by seq;
-- NULL when none is due), and the live lease (owner '' and version 0 when
-- the partition is free or its lease expired). One statement, so every
-- count and lease is read at one snapshot and one clock reading (MySQL
-- reads UTC_TIMESTAMP(6) once per statement); the counts are those of
-- stats.sql, split by partition. g lists the partitions that have
-- entries or a lease row; PartitionStats adds the others (with nothing to
-- report) and leaves out rows outside 0..count-1. (No recursive CTE
-- counting to the partition count: MySQL stops one at
-- cte_max_recursion_depth, 1000 by default.)
WITH c AS (
    SELECT `partition` AS p,
           SUM(state = 'pending') AS pending,
           SUM(state = 'pending' AND next_at <= UTC_TIMESTAMP(6)) AS due,
           SUM(state = 'parked') AS parked,
           MIN(CASE WHEN state = 'pending' AND next_at <= UTC_TIMESTAMP(6) THEN next_at END) AS oldest
    FROM {outbox}
    GROUP BY `partition`
)
SELECT g.p, COALESCE(c.pending, 0), COALESCE(c.due, 0), COALESCE(c.parked, 0),
       TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', c.oldest),
       (SELECT d.id FROM {outbox} AS d
        WHERE d.`partition` = g.p AND d.state = 'pending' AND d.next_at = c.oldest
        ORDER BY d.seq LIMIT 1),
       COALESCE(l.owner, ''), COALESCE(l.version, 0),
       TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', l.expires_at)
FROM (SELECT `partition` AS p FROM {lease} UNION SELECT DISTINCT `partition` FROM {outbox}) AS g
LEFT JOIN c ON c.p = g.p
LEFT JOIN {lease} AS l
       ON l.`partition` = g.p AND l.owner <> '' AND l.expires_at > UTC_TIMESTAMP(6)
ORDER BY g.p
