-- Heartbeat, first step: upserts the caller's member record with an
-- expiry and a renewal time by the server's clock. ? owner, ? partitions
-- (ascending, comma-separated), ? max_partitions, ? ttl in microseconds,
-- ? host, ? version, ? started in microseconds since the epoch (NULL:
-- unknown).
INSERT INTO {member} (owner, partitions, max_partitions, expires_at, host, version, started, renewed_at)
VALUES (?, ?, ?, TIMESTAMPADD(MICROSECOND, ?, UTC_TIMESTAMP(6)), ?, ?,
        TIMESTAMPADD(MICROSECOND, ?, '1970-01-01 00:00:00'), UTC_TIMESTAMP(6))
ON DUPLICATE KEY UPDATE
    partitions = VALUES(partitions), max_partitions = VALUES(max_partitions),
    expires_at = VALUES(expires_at), host = VALUES(host), version = VALUES(version),
    started = VALUES(started), renewed_at = VALUES(renewed_at)
