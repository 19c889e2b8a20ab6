-- FindPendingBatch: $1 partition, $2 owner, $3 version, $4 limit; for
-- FetchNext also $5, the IDs in flight, which {except} leaves out (they
-- are still pending, so an attempted one still holds its key back through
-- the NOT EXISTS; see Prefetcher in backend.go).
-- No row at all: the lease is lost. One row of NULLs: the lease holds and
-- nothing is due. The lease row is the claim: nothing is written per row,
-- so the lease's own unfinished entries are returned again (the relay
-- finishes a batch before it fetches the next).
-- The due index (partition, next_at, seq) WHERE state = 'pending' yields
-- rows in order; the hold-back index answers the NOT EXISTS (an entry
-- attempted or deferred holds back the later entries of its key).
--
-- The hold (migration 006) and a pause of the partition (migration 007)
-- are uncorrelated NOT EXISTS, which the planner runs once per statement
-- as one-time filters above the index scan: a held outbox or a paused
-- partition reads no entry row.
--
-- Paused topics (migration 007): the last condition's first arm is
-- uncorrelated too (an InitPlan, run once), so while no topic is paused
-- each row costs one test of its result, and the second arm, with pk, is
-- never run. While a topic is paused, the second arm leaves out the
-- topic's entries and the entries of a key appended after a pending entry
-- of a paused topic: pk, the paused keys of the partition with the seq of
-- their first paused entry, is read once per statement (one pass over the
-- partition's pending rows), then looked up in a hash per row; only an
-- entry of a paused key looks its seq up in pk.
--
-- ctid is where each row version is: MarkSent of these entries finds them
-- by it (see mark_sent_tid.sql).
WITH pk AS MATERIALIZED (
    SELECT p.key, min(p.seq) AS seq
    FROM {outbox} AS p
    WHERE p.partition = $1 AND p.state = 'pending' AND p.key <> ''::bytea
      AND p.topic IN (SELECT topic FROM {pause_topic})
    GROUP BY p.key
)
SELECT c.seq, c.next_at, c.id, c.topic, c.key, c.payload, c.headers, c.not_before,
       c.attempts, c.last_error, c.created_at, c.ctid
FROM {lease} AS l
LEFT JOIN LATERAL (
    SELECT o.seq, o.next_at, o.id, o.topic, o.key, o.payload, o.headers,
           o.not_before, o.attempts, o.last_error, o.created_at, o.ctid
    FROM {outbox} AS o
    WHERE o.partition = l.partition
      AND NOT EXISTS (SELECT 1 FROM {hold})
      AND NOT EXISTS (SELECT 1 FROM {pause_part} WHERE partition = $1)
      AND o.state = 'pending'
      {except}
      AND o.next_at <= now()
      AND (o.key = ''::bytea OR NOT EXISTS (
            SELECT 1 FROM {outbox} AS h
            WHERE h.partition = o.partition AND h.key = o.key AND h.seq < o.seq
              AND (h.attempts > 0 OR h.deferred) AND h.state = 'pending'))
      AND (NOT EXISTS (SELECT 1 FROM {pause_topic})
           OR (o.topic NOT IN (SELECT topic FROM {pause_topic})
               AND (o.key = ''::bytea OR o.key NOT IN (SELECT key FROM pk)
                    OR o.seq < (SELECT pk.seq FROM pk WHERE pk.key = o.key))))
    ORDER BY o.next_at, o.seq
    LIMIT $4
    {lock_rows}
) AS c ON true
WHERE l.partition = $1 AND l.owner = $2 AND l.version = $3 AND l.expires_at > now()
