-- PurgeParked, first statement of its READ COMMITTED transaction: locks
-- the parked entries parked before ? (microseconds since the Unix epoch,
-- UTC) or without a park time, at most ? of them, oldest park first (no
-- park time first, then by seq). It reads the parked rows of each
-- partition ({partition_list}) through the due index, whose second column
-- is the state, and sorts those: parked rows are few, and an index of their
-- own would cost every append an index write. SKIP LOCKED: a row another
-- transaction holds (a Requeue, a Cancel, a MarkSent) is left for a later
-- call instead of waited for. The third column is 1 for a row without a
-- park time (parked by a build before migration 002, or imported parked):
-- PurgeParked gives it one (now) instead of removing it.
SELECT o.seq, o.id, o.parked_at IS NULL
FROM {outbox} AS o FORCE INDEX ({due_idx})
WHERE o.`partition` IN ({partition_list}) AND o.state = 'parked'
  AND (o.parked_at IS NULL OR o.parked_at < TIMESTAMPADD(MICROSECOND, ?, '1970-01-01 00:00:00'))
ORDER BY o.parked_at, o.seq
LIMIT ?
FOR UPDATE SKIP LOCKED
