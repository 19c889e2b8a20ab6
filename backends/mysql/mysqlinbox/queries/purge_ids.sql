-- Purge, IDs: ? the horizon (microseconds since the Unix epoch, UTC), ?
-- the limit. The oldest records before the horizon, by applied_at_idx,
-- locked for the delete that follows; a row another transaction holds (a
-- Record of the same ID waiting on it, or one being written) is skipped.
-- FORCE INDEX: the index order gives the oldest first and stops at the
-- limit; a scan and sort would lock every old row, not just the limit.
SELECT id FROM {inbox} FORCE INDEX (applied_at_idx)
WHERE applied_at < TIMESTAMPADD(MICROSECOND, ?, '1970-01-01 00:00:00')
ORDER BY applied_at
LIMIT ?
FOR UPDATE SKIP LOCKED
