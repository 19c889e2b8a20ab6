-- ExportBatch: $1 partition, $2 owner, $3 version, $4 limit. Fenced and
-- read-only like find_pending_batch.sql: no row at all means the lease is
-- lost, one row of NULLs that the partition is empty. Every row of the
-- partition, pending (due, scheduled, retrying, held back, claimed) or
-- parked, in seq order (the append order; imported entries have negative
-- seq and come first; a requeued entry has the seq of its requeue). The
-- client sorts by seq again (the lateral's order is not promised through
-- the join). Without an index on (partition, seq) this is a top-N sort of
-- the partition's rows per call (see docs/postgres.md, "Moving an
-- outbox").
SELECT c.seq, c.id, c.topic, c.key, c.payload, c.headers, c.not_before,
       c.attempts, c.last_error, c.created_at, c.state = 'parked', c.next_at,
       c.deferred AND c.state = 'pending', c.history
FROM {lease} AS l
LEFT JOIN LATERAL (
    SELECT o.seq, o.id, o.topic, o.key, o.payload, o.headers, o.not_before,
           o.attempts, o.last_error, o.created_at, o.state, o.next_at,
           o.deferred, o.history
    FROM {outbox} AS o
    WHERE o.partition = l.partition
    ORDER BY o.seq
    LIMIT $4
) AS c ON true
WHERE l.partition = $1 AND l.owner = $2 AND l.version = $3 AND l.expires_at > now()
