-- MarkSent with the archive: copies the pending or parked entries of
-- partition ? with the IDs (? a JSON array of strings) to the archive,
-- with the server's time as sent_at, in the transaction lock_lease.sql
-- began; mark_sent.sql then deletes them. REPLACE: an ID archived before
-- (sent, appended again, sent again) is replaced by its latest delivery.
REPLACE INTO {archive} (seq, id, `partition`, topic, `key`, payload, headers, not_before,
                        created_at, attempts, last_error, history, sent_at)
SELECT o.seq, o.id, o.`partition`, o.topic, o.`key`, o.payload, o.headers, o.not_before,
       o.created_at, o.attempts, o.last_error, o.history, UTC_TIMESTAMP(6)
FROM JSON_TABLE(?, '$[*]' COLUMNS (id VARBINARY(255) PATH '$')) AS j
STRAIGHT_JOIN {outbox} AS o FORCE INDEX ({id_uq}) ON o.id = j.id
WHERE o.`partition` = ?
