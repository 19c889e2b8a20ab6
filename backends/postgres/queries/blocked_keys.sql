-- BlockedKeys: $1 whether this is the first page, $2 and $3 the since and
-- head ID of the last key of the previous page, $4 limit, and the filter
-- of entries.sql ($5..$9) on the head entry. The heads are those of
-- blocked_heads.sql, ordered by since, then by the byte order of the
-- head's ID. The columns are those of entry_columns.sql, then waiting and
-- since.
WITH {blocked_heads}
SELECT {entry_columns}, o.waiting, o.since
FROM bk_heads AS o
WHERE ($1 OR (o.since, o.id COLLATE "C") > ($2::timestamptz, $3::text COLLATE "C"))
  AND ($5::text IS NULL OR o.topic = $5)
  AND ($6::bytea IS NULL OR o.key = $6)
  AND ($7::text IS NULL
       OR strpos(translate(o.last_error, 'ABCDEFGHIJKLMNOPQRSTUVWXYZ', 'abcdefghijklmnopqrstuvwxyz'), $7) > 0)
  AND ($8::timestamptz IS NULL OR o.created_at >= $8)
  AND ($9::timestamptz IS NULL OR o.created_at < $9)
ORDER BY o.since, o.id COLLATE "C"
LIMIT $4
