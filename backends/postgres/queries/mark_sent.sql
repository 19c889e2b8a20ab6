-- MarkSent: $1 partition, $2 owner, $3 version, $4 ids. One statement,
-- fenced: the lease row is read FOR SHARE, so a takeover (an UPDATE of that
-- row) waits for this statement, and a statement that starts after a
-- takeover sees the new owner/version and deletes nothing. Returns whether
-- the lease matched and how many rows were removed. The DELETE returns
-- whole rows only when the archive takes them, else a constant to count.
WITH l AS MATERIALIZED (
    SELECT 1 FROM {lease}
    WHERE partition = $1 AND owner = $2 AND version = $3 AND expires_at > now()
    FOR SHARE
), d AS (
    DELETE FROM {outbox} AS o
    WHERE o.id = ANY($4::text[]) AND o.partition = $1 AND EXISTS (SELECT 1 FROM l)
    RETURNING {sent_returning}
){archive_insert}
SELECT EXISTS (SELECT 1 FROM l), (SELECT count(*) FROM d)
