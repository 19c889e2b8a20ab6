-- Stats: one scan of the outbox.
SELECT count(*) FILTER (WHERE state = 'pending'),
       count(*) FILTER (WHERE state = 'pending' AND next_at <= now()),
       count(*) FILTER (WHERE state = 'parked'),
       min(next_at) FILTER (WHERE state = 'pending' AND next_at <= now())
FROM {outbox}
