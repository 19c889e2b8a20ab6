-- Import, first statement of its transaction: locks the import counter
-- (so concurrent imports take their seqs in turn and keep the order they
-- were imported in) and reads it, the server's clock and the time the
-- outbox was first held (NULL when it is not held), in microseconds.
SELECT i.next_seq,
       TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6)),
       (SELECT TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', h.since) FROM {hold} AS h WHERE h.one = 1)
FROM {import} AS i
WHERE i.one = 1
FOR UPDATE
