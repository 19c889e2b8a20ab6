-- PurgeArchiveBatch (and PurgeArchive): one bounded batch of the archive's
-- rows sent before $1, at most $2, oldest first. $1 sent before, $2 limit.
-- Run in a transaction with a bounded lock_timeout and statement_timeout
-- (see retention.go). The rows are chosen FOR UPDATE SKIP LOCKED: a row
-- another transaction holds is skipped, never waited for, and removed by
-- a later batch. Rows are deleted by (tableoid, ctid), which names a row
-- of a plain archive and of any partition of a partitioned one (an ID may
-- be archived once per delivery there). The rows are locked by s, so their
-- ctids cannot change before the DELETE; ctid = ANY makes a TID scan.
-- Returns the number of rows deleted.
WITH s AS (
    SELECT a.tableoid AS t, a.ctid AS c
    FROM {archive} AS a
    WHERE a.sent_at < $1
    ORDER BY a.sent_at
    LIMIT $2
    FOR UPDATE SKIP LOCKED
), d AS (
    DELETE FROM {archive} AS a
    WHERE a.ctid = ANY(ARRAY(SELECT c FROM s))
      AND (a.tableoid, a.ctid) IN (SELECT t, c FROM s)
    RETURNING 1
)
SELECT count(*) FROM d
