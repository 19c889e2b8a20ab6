-- Heartbeat, first step: upserts the caller's member record with an
-- expiry and a renewal time by the server's clock. ? owner, then twice
-- (for the insert and for the update of an existing record, without the
-- VALUES() function MySQL 8.0.20 deprecates): ? partitions (ascending,
-- comma-separated), ? max_partitions, ? ttl in microseconds, ? host,
-- ? version, ? started in microseconds since the epoch (NULL: unknown).
INSERT INTO {member} (owner, partitions, max_partitions, expires_at, host, version, started, renewed_at)
VALUES (?, ?, ?, TIMESTAMPADD(MICROSECOND, ?, UTC_TIMESTAMP(6)), ?, ?,
        TIMESTAMPADD(MICROSECOND, ?, '1970-01-01 00:00:00'), UTC_TIMESTAMP(6))
ON DUPLICATE KEY UPDATE
    partitions = ?, max_partitions = ?,
    expires_at = TIMESTAMPADD(MICROSECOND, ?, UTC_TIMESTAMP(6)),
    host = ?, version = ?,
    started = TIMESTAMPADD(MICROSECOND, ?, '1970-01-01 00:00:00'),
    renewed_at = UTC_TIMESTAMP(6)
