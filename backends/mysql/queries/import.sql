-- Import, third statement (one or more, {rows} rows each): per entry ?
-- seq, id, partition, topic, key, payload, headers, not_before
-- (microseconds or NULL), created_at (microseconds), next_at
-- (microseconds), attempts, state, last_error, history (JSON text or
-- NULL), deferred. An ID already stored (imported or appended), or
-- repeated in the call after its first occurrence, is skipped: the
-- update of id to itself changes nothing.
INSERT INTO {outbox}
    (seq, id, `partition`, topic, `key`, payload, headers, not_before, created_at,
     next_at, attempts, state, last_error, history, deferred)
VALUES {rows}
ON DUPLICATE KEY UPDATE id = id
