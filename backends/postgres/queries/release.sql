-- Release: claims are the lease itself and rows were never changed, so
-- releasing entries only checks that the lease still holds (fencing).
SELECT EXISTS (
    SELECT 1 FROM {lease}
    WHERE partition = $1 AND owner = $2 AND version = $3 AND expires_at > now()
)
