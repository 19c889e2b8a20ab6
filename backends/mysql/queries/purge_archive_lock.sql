-- PurgeArchiveBatch, first statement of its READ COMMITTED transaction:
-- locks the oldest archived rows sent before ? (microseconds since the
-- Unix epoch, UTC), at most ? of them, through the sent_at index, oldest
-- first. SKIP LOCKED: a row another transaction holds (MarkSent replacing
-- an ID archived before, another purge) is left for a later call instead
-- of waited for. READ COMMITTED takes no gap locks, so no MarkSent
-- inserting into the archive waits for this transaction either.
SELECT a.id
FROM {archive} AS a FORCE INDEX ({archive_sent_idx})
WHERE a.sent_at < TIMESTAMPADD(MICROSECOND, ?, '1970-01-01 00:00:00')
ORDER BY a.sent_at
LIMIT ?
FOR UPDATE SKIP LOCKED
