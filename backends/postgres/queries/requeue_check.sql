-- Requeue, first statement of its transaction: $1 ids. Locks the parked
-- rows among them and returns what Requeue checks before it requeues one:
-- whether the topic, headers and partition columns can be published (the
-- headers are decoded by pgoutbox.DecodeHeaders). requeue.sql then runs in
-- the same transaction with the IDs that passed.
SELECT id, topic, headers, partition
FROM {outbox}
WHERE id = ANY($1::text[]) AND state = 'parked'
FOR UPDATE
