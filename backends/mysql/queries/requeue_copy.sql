-- Requeue, third statement: {ids_by_seq} is "CASE o.seq WHEN ? THEN ? ...
-- END", the original ID of each old seq, {seqs} the old seqs. Copies each
-- row as a new row, in the order of the old seqs, so AUTO_INCREMENT gives
-- the copies new seqs in that order: ordered as if appended now. Pending,
-- due now (one clock reading), attempts 0, not deferred, last_error and
-- history kept; payload, headers and times are copied by the server.
INSERT INTO {outbox}
    (id, `partition`, topic, `key`, payload, headers, not_before, created_at,
     next_at, attempts, state, last_error, history, deferred)
SELECT {ids_by_seq}, o.`partition`, o.topic, o.`key`, o.payload, o.headers, o.not_before,
       o.created_at, UTC_TIMESTAMP(6), 0, 'pending', o.last_error, o.history, 0
FROM {outbox} AS o
WHERE o.seq IN ({seqs})
ORDER BY o.seq
