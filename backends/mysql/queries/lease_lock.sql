-- RenewLease, and AcquireLease by the lease's own holder: the lease row,
-- locked for the rest of the short transaction. It waits for the shared
-- locks of the holder's own fenced writes, which are short.
-- ? partition. now_us is the server's clock the expiry is computed from.
SELECT owner, version, expires_at > UTC_TIMESTAMP(6) AS live,
       TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6)) AS now_us
FROM {lease}
WHERE `partition` = ?
FOR UPDATE
