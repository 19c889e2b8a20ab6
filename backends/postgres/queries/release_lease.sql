-- ReleaseLease: compare-and-free. The row stays (owner '' = free) so the
-- next AcquireLease continues from this version.
UPDATE {lease}
SET owner = '', expires_at = now()
WHERE partition = $1 AND owner = $2 AND version = $3 AND expires_at > now()
