-- FindPendingBatch: ? partition, [FetchNext: ? the IDs in flight as a
-- JSON array, which {except} leaves out], ? limit, then ? partition,
-- ? owner, ? version. One statement, one round trip.
--
-- No row at all: the lease is lost (expired, taken over or released). One
-- row of NULLs: the lease holds and nothing is due. The lease row is the
-- claim: nothing is written per row, so the lease's own unfinished
-- entries are returned again (the relay finishes a batch before it
-- fetches the next). The lease row is a const table (its primary key
-- equals a constant), read before the derived table.
--
-- The derived table walks outbox_due_idx (partition, state, next_at, seq)
-- from its start for the partition's pending rows, in (next_at, seq)
-- order, with next_at <= now as an index condition, and stops after LIMIT
-- rows that pass the filters: no filesort (EXPLAIN: ref on
-- outbox_due_idx, "Using index condition; Using where"; see
-- TestFetchPlan). The hold and a pause of the partition are uncorrelated
-- subqueries, evaluated once. The per-key hold-back is a NOT EXISTS on
-- outbox_holdback_idx (partition, holds = 1, key_hash, seq < o.seq),
-- comparing the key itself too (key_hash is a SHA-256 of it).
--
-- Every read of the outbox names its index (FORCE INDEX): on a table
-- whose statistics are not yet collected (a new outbox, a burst of
-- appends) the optimizer otherwise reads the hold-back subquery through
-- outbox_due_idx, hundreds of rows per entry instead of none.
--
-- Paused topics: while none is paused (the uncorrelated NOT EXISTS, run
-- once), nothing else is read. While one is, a paused topic's entries are
-- left out, and so is an entry of a key that has an earlier pending entry
-- of a paused topic: that earlier entry either holds (attempted or
-- deferred: the hold-back above finds it) or not (holds = 0, found by
-- the last NOT EXISTS through outbox_holdback_idx with an equality on
-- holds, so that key_hash is used too).
SELECT c.seq, TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', c.next_at), c.id, c.topic, c.`key`, c.payload, c.headers,
       TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', c.not_before), c.attempts, c.last_error,
       TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', c.created_at)
FROM {lease} AS l
LEFT JOIN (
    SELECT o.seq, o.next_at, o.id, o.topic, o.`key`, o.payload, o.headers, o.not_before,
           o.attempts, o.last_error, o.created_at
    FROM {outbox} AS o FORCE INDEX ({due_idx})
    WHERE o.`partition` = ?
      {except}
      AND o.state = 'pending'
      AND o.next_at <= UTC_TIMESTAMP(6)
      AND NOT EXISTS (SELECT 1 FROM {hold})
      AND NOT EXISTS (SELECT 1 FROM {pause_part} AS pp WHERE pp.`partition` = o.`partition`)
      AND (o.`key` = '' OR NOT EXISTS (
            SELECT 1 FROM {outbox} AS h FORCE INDEX ({holdback_idx})
            WHERE h.`partition` = o.`partition` AND h.holds = 1 AND h.key_hash = o.key_hash
              AND h.seq < o.seq AND h.`key` = o.`key`))
      AND (NOT EXISTS (SELECT 1 FROM {pause_topic})
           OR (o.topic NOT IN (SELECT pt.topic FROM {pause_topic} AS pt)
               AND (o.`key` = '' OR NOT EXISTS (
                    SELECT 1 FROM {outbox} AS p FORCE INDEX ({holdback_idx})
                    WHERE p.`partition` = o.`partition` AND p.holds = 0 AND p.key_hash = o.key_hash
                      AND p.seq < o.seq AND p.`key` = o.`key` AND p.state = 'pending'
                      AND p.topic IN (SELECT pt.topic FROM {pause_topic} AS pt)))))
    ORDER BY o.next_at, o.seq
    LIMIT ?
) AS c ON TRUE
WHERE l.`partition` = ? AND l.owner = ? AND l.version = ? AND l.expires_at > UTC_TIMESTAMP(6)
