-- AcquireLease and RenewLease, last step, on the row lease_lock.sql or
-- lease_lock_skip.sql locked: ? owner, ? version, ? expiry in microseconds
-- since the epoch (the locking read's now_us plus the ttl), ? partition.
UPDATE {lease}
SET owner = ?, version = ?,
    expires_at = TIMESTAMPADD(MICROSECOND, ?, '1970-01-01 00:00:00')
WHERE `partition` = ?
