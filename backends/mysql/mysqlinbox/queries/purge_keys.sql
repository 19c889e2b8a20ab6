-- Purge, keys: ? the horizon (microseconds since the Unix epoch, UTC), ?
-- the limit. The keys whose number was last set before the horizon,
-- oldest first, locked for the delete that follows, skipping rows another
-- transaction holds.
-- FORCE INDEX: as in purge_ids.sql.
SELECT key_hash FROM {keyseq} FORCE INDEX (updated_at_idx)
WHERE updated_at < TIMESTAMPADD(MICROSECOND, ?, '1970-01-01 00:00:00')
ORDER BY updated_at
LIMIT ?
FOR UPDATE SKIP LOCKED
