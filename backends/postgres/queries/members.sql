-- Members: the live member records (expires_at after now()), sorted by
-- owner in byte order. Reads only; expired records are left to Heartbeat.
SELECT owner, partitions, max_partitions, expires_at, host, version, started, renewed_at
FROM {member}
WHERE expires_at > now()
ORDER BY owner COLLATE "C"
