-- Heartbeat and Members: every member record, expired ones too (live = 0;
-- Heartbeat deletes them), by a consistent read. Times in microseconds
-- since the epoch. Sorted in Go (byte order of owners).
SELECT owner, partitions, max_partitions,
       TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', expires_at),
       host, version,
       TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', started),
       TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', renewed_at),
       expires_at > UTC_TIMESTAMP(6) AS live
FROM {member}
