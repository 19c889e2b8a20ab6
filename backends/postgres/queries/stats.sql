-- Stats: one scan of the outbox. Every row counts, also one whose partition
-- is out of range (never fetched); next_at '-infinity' (a hand-made value)
-- is left out of the oldest due time.
SELECT count(*) FILTER (WHERE state = 'pending'),
       count(*) FILTER (WHERE state = 'pending' AND next_at <= now()),
       count(*) FILTER (WHERE state = 'parked'),
       min(next_at) FILTER (WHERE state = 'pending' AND next_at <= now() AND isfinite(next_at))
FROM {outbox}
