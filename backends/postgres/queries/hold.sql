-- Hold: $1 reason. Creates the hold row (since = now()) or, when the
-- outbox is held, replaces the reason and keeps since.
INSERT INTO {hold} AS h (reason) VALUES ($1)
ON CONFLICT (one) DO UPDATE SET reason = EXCLUDED.reason
