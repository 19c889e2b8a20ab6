-- MarkSent of entries this Backend fetched: $1 partition, $2 owner,
-- $3 version, $4 ids, $5 the ctids the fetch read those of them it
-- returned (any order). Fenced like mark_sent.sql. d1 deletes the rows
-- found at those ctids (a TID scan: no index descent per row) whose ID is
-- one of $4; a ctid that no longer holds such a row (the row was updated
-- or deleted since the fetch, and its slot perhaps reused) deletes
-- nothing, and d2 deletes by ID every entry of $4 that d1 did not (in
-- the usual case d1 deleted as many rows as $4 has IDs, and d2 reads
-- nothing). Returns whether the lease
-- matched and how many rows were removed. The DELETEs return whole rows
-- only when the archive takes them.
WITH l AS MATERIALIZED (
    SELECT 1 FROM {lease}
    WHERE partition = $1 AND owner = $2 AND version = $3 AND expires_at > now()
    FOR SHARE
), d1 AS (
    DELETE FROM {outbox} AS o
    WHERE o.ctid = ANY($5::tid[]) AND o.id = ANY($4::text[]) AND o.partition = $1
      AND EXISTS (SELECT 1 FROM l)
    RETURNING {sent_returning}
), d2 AS (
    DELETE FROM {outbox} AS o
    WHERE (SELECT count(*) FROM d1) < cardinality($4::text[])
      AND o.id = ANY(ARRAY(SELECT unnest($4::text[]) EXCEPT SELECT id FROM d1))
      AND o.partition = $1 AND EXISTS (SELECT 1 FROM l)
    RETURNING {sent_returning}
), d AS (
    SELECT * FROM d1 UNION ALL SELECT * FROM d2
){archive_insert}
SELECT EXISTS (SELECT 1 FROM l), (SELECT count(*) FROM d)
