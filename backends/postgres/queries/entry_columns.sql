o.id, o.partition, o.topic, o.key, o.payload, o.headers, o.not_before, o.attempts,
o.last_error, o.created_at, o.state = 'parked', o.next_at, o.deferred AND o.state = 'pending',
o.history
