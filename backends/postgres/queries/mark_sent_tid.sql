-- MarkSent by row location: $1 partition, $2 owner, $3 version, $4 ids,
-- $5 the rows' ctids as FindPendingBatch of this Backend read them
-- (parallel to $4). A row is deleted only when the row at that ctid still
-- has that ID, so a row that moved (updated, or the table rewritten) or a
-- ctid reused by another row is simply not deleted here; the caller
-- finishes the IDs this statement did not delete with mark_sent.sql.
-- Fenced like mark_sent.sql. Returns whether the lease matched and the
-- IDs deleted.
WITH l AS MATERIALIZED (
    SELECT 1 FROM {lease}
    WHERE partition = $1 AND owner = $2 AND version = $3 AND expires_at > now()
    FOR SHARE
), d AS (
    DELETE FROM {outbox} AS o
    USING unnest($5::tid[], $4::text[]) AS u(ct, id)
    WHERE o.ctid = u.ct AND o.id = u.id AND o.partition = $1 AND EXISTS (SELECT 1 FROM l)
    RETURNING o.*
){archive_insert}
SELECT EXISTS (SELECT 1 FROM l), coalesce((SELECT array_agg(id) FROM d), '{}'::text[])
