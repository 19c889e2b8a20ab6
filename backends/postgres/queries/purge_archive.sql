-- PurgeArchive: one bounded batch. $1 sent before, $2 batch size.
DELETE FROM {archive}
WHERE id IN (
    SELECT id FROM {archive} WHERE sent_at < $1 ORDER BY sent_at LIMIT $2
)
