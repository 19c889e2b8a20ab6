-- Requeue, first statement of its transaction: {ids} the IDs. Locks the
-- parked rows among them and returns what Requeue checks before it
-- requeues one (topic, headers and partition columns), in seq order.
SELECT o.seq, o.id, o.topic, o.headers, o.`partition`
FROM {outbox} AS o
WHERE o.id IN ({ids}) AND o.state = 'parked'
ORDER BY o.seq
FOR UPDATE
