-- MarkSent of entries this Backend fetched: $1 partition, $2 owner,
-- $3 version, $4 ids, and $5/$6 parallel arrays: the ctid at which the
-- fetch read each of those it returned, and its ID. Fenced like
-- mark_sent.sql. d1 deletes the row at each ctid when it has that ID (a
-- TID scan per pair: no index descent); a ctid that no longer holds that
-- row (it was updated or deleted since the fetch, and its slot perhaps
-- reused) deletes nothing, and d2 deletes by ID every entry of $4 that d1
-- did not (in the usual case d1 deleted as many rows as $4 has IDs, and d2
-- reads nothing). Returns whether the lease matched and how many rows were
-- removed. The DELETEs return whole rows only when the archive takes them.
WITH l AS MATERIALIZED (
    SELECT 1 FROM {lease}
    WHERE partition = $1 AND owner = $2 AND version = $3 AND expires_at > now()
    FOR SHARE
), d1 AS (
    DELETE FROM {outbox} AS o
    USING unnest($5::tid[], $6::text[]) AS f(t, id)
    WHERE o.ctid = f.t AND o.id = f.id AND o.partition = $1
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
