-- RenewLease: compare-and-renew. $1 partition, $2 owner, $3 version,
-- $4 ttl in microseconds. No row means the lease was lost.
UPDATE {lease}
SET expires_at = now() + $4::bigint * interval '1 microsecond'
WHERE partition = $1 AND owner = $2 AND version = $3 AND expires_at > now()
RETURNING expires_at
