-- FetchBatch's parks of rows it cannot publish as stored (their headers do
-- not decode, their topic is ''): ? a JSON array of [id, reason], then
-- ? partition, ? owner, ? version. Fenced like mark_failed.sql (the lease
-- row is read with a shared lock), and parks as it does (attempts + 1, the
-- reason as last_error, next_at kept, parked_at the server's time), touching only pending rows.
UPDATE {lease} AS l
STRAIGHT_JOIN JSON_TABLE(?, '$[*]' COLUMNS (
        id     VARBINARY(255) PATH '$[0]',
        reason TEXT CHARACTER SET utf8mb4 PATH '$[1]')) AS f
STRAIGHT_JOIN {outbox} AS o FORCE INDEX ({id_uq}) ON o.id = f.id AND o.`partition` = l.`partition`
SET o.attempts = LEAST(GREATEST(o.attempts, 0), 2147483646) + 1,
    o.last_error = f.reason,
    o.deferred = 0,
    o.parked_at = UTC_TIMESTAMP(6),
    o.state = 'parked'
WHERE l.`partition` = ? AND l.owner = CAST(? AS BINARY) AND l.version = ? AND l.expires_at > UTC_TIMESTAMP(6)
  AND o.state = 'pending'
