-- FindPendingBatch: $1 partition, $2 owner, $3 version, $4 limit; for
-- FetchNext also $5, the IDs in flight, which {except} leaves out (they
-- are still pending, so an attempted one still holds its key back through
-- the NOT EXISTS; see Prefetcher in backend.go).
-- No row at all: the lease is lost. One row of NULLs: the lease holds and
-- nothing is due. The lease row is the claim: nothing is written per row,
-- so the lease's own unfinished entries are returned again (the relay
-- finishes a batch before it fetches the next).
-- The due index (partition, next_at, seq) WHERE state = 'pending' yields
-- rows in order; the hold-back index answers the NOT EXISTS.
-- {hold_check} is the hold (migration 006): an uncorrelated NOT EXISTS on
-- the hold table, which the planner runs once per statement as a one-time
-- filter above the index scan (a held outbox reads no entry row). For an
-- outbox from before 006 it is empty, and {hold_probe} reports whether the
-- hold table has appeared since (the Backend then switches to the query
-- with the check); otherwise {hold_probe} is false. ctid is where each row
-- version is: MarkSent of these entries finds them by it (see
-- mark_sent_tid.sql).
SELECT {hold_probe}, c.seq, c.next_at, c.id, c.topic, c.key, c.payload, c.headers, c.not_before,
       c.attempts, c.last_error, c.created_at, c.ctid
FROM {lease} AS l
LEFT JOIN LATERAL (
    SELECT o.seq, o.next_at, o.id, o.topic, o.key, o.payload, o.headers,
           o.not_before, o.attempts, o.last_error, o.created_at, o.ctid
    FROM {outbox} AS o
    WHERE o.partition = l.partition
      {hold_check}
      AND o.state = 'pending'
      {except}
      AND o.next_at <= now()
      AND (o.key = ''::bytea OR NOT EXISTS (
            SELECT 1 FROM {outbox} AS h
            WHERE h.partition = o.partition AND h.key = o.key AND h.seq < o.seq
              AND h.attempts > 0 AND h.state = 'pending'))
    ORDER BY o.next_at, o.seq
    LIMIT $4
    {lock_rows}
) AS c ON true
WHERE l.partition = $1 AND l.owner = $2 AND l.version = $3 AND l.expires_at > now()
