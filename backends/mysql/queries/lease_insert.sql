-- AcquireLease of a partition whose lease row is missing (deleted by
-- hand; Migrate creates one per partition): ? partition, ? owner,
-- ? version, ? expiry in microseconds since the epoch. A concurrent
-- acquire that recreated the row first makes it fail with a duplicate key.
INSERT INTO {lease} (`partition`, owner, version, expires_at)
VALUES (?, ?, ?, TIMESTAMPADD(MICROSECOND, ?, '1970-01-01 00:00:00'))
