-- AcquireLease of a lease that looked free or expired: the lease row,
-- locked for the rest of the acquire's short transaction, or no row when
-- another transaction holds a lock on it (SKIP LOCKED). The holder's
-- fenced writes read the row with a shared lock and a concurrent acquire
-- or release locks it exclusively: a locked row is a lease in use, so the
-- acquire reports it held at once instead of waiting behind those writes
-- (this is the backend's use of SKIP LOCKED).
-- ? partition. now_us is the server's clock the expiry is computed from.
SELECT owner, version, expires_at > UTC_TIMESTAMP(6) AS live,
       TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6)) AS now_us
FROM {lease}
WHERE `partition` = ?
FOR UPDATE SKIP LOCKED
