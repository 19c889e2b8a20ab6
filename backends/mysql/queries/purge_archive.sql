-- PurgeArchive: one bounded batch, oldest first. ? sent before (microseconds
-- since the Unix epoch, UTC), ? batch size. The sent_at index gives the
-- order; the statement stops after LIMIT rows.
DELETE FROM {archive}
WHERE sent_at < TIMESTAMPADD(MICROSECOND, ?, '1970-01-01 00:00:00')
ORDER BY sent_at
LIMIT ?
