-- BlockedKeys: ? whether this is the first page, ? the since
-- (microseconds) and ? the head ID (bytes) of the last key of the
-- previous page, then the filter of entries.sql on the head entry, then ?
-- limit. The heads are those of blocked_heads.sql, ordered by since, then
-- by the bytes of the head's ID. The columns are those of {entry_columns},
-- then waiting and since (microseconds).
WITH {blocked_heads}
SELECT {entry_columns}, o.waiting, TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', o.since)
FROM bk_heads AS o
WHERE (? OR (o.since, o.id) > (TIMESTAMPADD(MICROSECOND, ?, '1970-01-01 00:00:00'), ?))
  AND (? IS NULL OR CAST(o.topic AS BINARY) = ?)
  AND (? IS NULL OR o.`key` = ?)
  AND (? IS NULL OR (o.last_error <> '' AND LOCATE(?, {fold}) > 0))
  AND (? IS NULL OR o.created_at >= TIMESTAMPADD(MICROSECOND, ?, '1970-01-01 00:00:00'))
  AND (? IS NULL OR o.created_at < TIMESTAMPADD(MICROSECOND, ?, '1970-01-01 00:00:00'))
ORDER BY o.since, o.id
LIMIT ?
