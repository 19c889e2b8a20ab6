-- RemoveExported: $1 partition, $2 owner, $3 version, $4 ids. Fenced like
-- mark_sent.sql (the lease row FOR SHARE), whatever the rows' state, and
-- never archived: the entries were moved, not sent. Returns whether the
-- lease matched and how many rows were removed.
WITH l AS MATERIALIZED (
    SELECT 1 FROM {lease}
    WHERE partition = $1 AND owner = $2 AND version = $3 AND expires_at > now()
    FOR SHARE
), d AS (
    DELETE FROM {outbox} AS o
    WHERE o.id = ANY($4::text[]) AND o.partition = $1 AND EXISTS (SELECT 1 FROM l)
    RETURNING 1
)
SELECT EXISTS (SELECT 1 FROM l), (SELECT count(*) FROM d)
