-- Entries: $1 after id, $2 limit, and the filter, each NULL when unset:
-- $3 topic, $4 key, $5 error (ASCII lower-cased: a substring of the last
-- error with its ASCII letters lower-cased; other characters compare as
-- they are, whatever the database's collation), $6 created at or after,
-- $7 created before. {state} is the state's condition, judged by the
-- statement's now(): due (pending, next_at <= now()), scheduled (pending,
-- later, never attempted), retrying (pending, later, attempted), parked.
-- Ordered by the byte order of id (COLLATE "C"): for parked entries the
-- parked index (id COLLATE "C") walks it; for pending ones the due index
-- finds the state's rows, which are sorted (a top-N sort of the rows of
-- the state that pass the filter, after $1). The columns are those of
-- entry_columns.sql.
SELECT {entry_columns}
FROM {outbox} AS o
WHERE {state}
  AND o.id COLLATE "C" > $1
  AND ($3::text IS NULL OR o.topic = $3)
  AND ($4::bytea IS NULL OR o.key = $4)
  AND ($5::text IS NULL
       OR strpos(translate(o.last_error, 'ABCDEFGHIJKLMNOPQRSTUVWXYZ', 'abcdefghijklmnopqrstuvwxyz'), $5) > 0)
  AND ($6::timestamptz IS NULL OR o.created_at >= $6)
  AND ($7::timestamptz IS NULL OR o.created_at < $7)
ORDER BY o.id COLLATE "C"
LIMIT $2
