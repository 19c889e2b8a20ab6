-- HoldState: the hold row's reason and since (microseconds); no row when
-- the outbox is not held.
SELECT reason, TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', since) FROM {hold} WHERE one = 1
