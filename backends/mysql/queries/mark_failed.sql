-- MarkFailed: ? the failures as a JSON array of [id, error, delay in
-- microseconds, park 0/1, deferred 0/1], ? owner twice (for the history),
-- then ? partition, ? owner, ? version. One multi-table UPDATE fenced by the
-- lease as mark_sent.sql is (the lease row is read with a shared lock).
-- Parked and sent (deleted) rows are never touched. The due time is
-- computed here, by the server's clock: UTC_TIMESTAMP(6) + delay; a
-- negative delay puts it in the past. attempts counts on from 0 when a
-- hand-made UPDATE made it negative, and stops at the INT maximum instead
-- of failing the statement.
--
-- A failure appends {"at": the server's UTC time, "error", "owner"} to
-- history and, when history already held {max_history} elements or more,
-- removes its first (MariaDB 10.6 has no JSON path ranges to keep the
-- last N in one step; a history made longer than {max_history} by hand
-- keeps its length from then on instead of shrinking). A deferred failure (never park: the Backend rejects
-- both) only sets next_at and deferred: attempts, last_error and history
-- stay. Any other failure clears deferred. A park sets parked_at to the
-- server's time (PurgeParked's park time). No assignment reads a column an
-- earlier one sets (MySQL applies them left to right).
UPDATE {lease} AS l
STRAIGHT_JOIN JSON_TABLE(?, '$[*]' COLUMNS (
        id       VARBINARY(255) PATH '$[0]',
        error    TEXT CHARACTER SET utf8mb4 PATH '$[1]',
        delay_us BIGINT PATH '$[2]',
        park     INT PATH '$[3]',
        deferred INT PATH '$[4]')) AS f
STRAIGHT_JOIN {outbox} AS o FORCE INDEX ({id_uq}) ON o.id = f.id AND o.`partition` = l.`partition`
SET o.attempts = IF(f.deferred <> 0, o.attempts, LEAST(GREATEST(o.attempts, 0), 2147483646) + 1),
    o.last_error = IF(f.deferred <> 0, o.last_error, f.error),
    o.history = IF(f.deferred <> 0, o.history,
        IF(COALESCE(JSON_LENGTH(o.history), 0) >= {max_history},
            JSON_REMOVE(JSON_ARRAY_APPEND(COALESCE(o.history, JSON_ARRAY()), '$', JSON_OBJECT(
                'at', DATE_FORMAT(UTC_TIMESTAMP(6), '%Y-%m-%dT%H:%i:%s.%fZ'), 'error', f.error, 'owner', ?)), '$[0]'),
            JSON_ARRAY_APPEND(COALESCE(o.history, JSON_ARRAY()), '$', JSON_OBJECT(
                'at', DATE_FORMAT(UTC_TIMESTAMP(6), '%Y-%m-%dT%H:%i:%s.%fZ'), 'error', f.error, 'owner', ?)))),
    o.deferred = IF(f.deferred <> 0, 1, 0),
    o.next_at = IF(f.park <> 0, o.next_at, TIMESTAMPADD(MICROSECOND, f.delay_us, UTC_TIMESTAMP(6))),
    o.parked_at = IF(f.park <> 0, UTC_TIMESTAMP(6), NULL),
    o.state = IF(f.park <> 0, 'parked', 'pending')
WHERE l.`partition` = ? AND l.owner = CAST(? AS BINARY) AND l.version = ? AND l.expires_at > UTC_TIMESTAMP(6)
  AND o.state = 'pending'
