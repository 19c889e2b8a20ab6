-- Entries: ? after id (bytes), then the filter, each NULL when unset:
-- ? ? topic (twice), ? ? key (twice), ? ? error (twice; ASCII
-- lower-cased bytes, found in the last error with its ASCII letters
-- lower-cased: {fold} folds A-Z byte by byte, so no collation and no
-- Unicode case mapping is involved), ? ? created at or after
-- (microseconds, twice), ? ? created before (twice); then ? limit.
-- {state} is the state's condition: due (pending, next_at not after now),
-- scheduled (pending, later, never attempted), retrying (pending, later,
-- attempted), parked. Ordered by the bytes of id (as Go compares
-- strings): a sort of the state's rows that pass the filter.
SELECT {entry_columns}
FROM {outbox} AS o
WHERE {state}
  AND o.id > ?
  AND (? IS NULL OR CAST(o.topic AS BINARY) = ?)
  AND (? IS NULL OR o.`key` = ?)
  AND (? IS NULL OR (o.last_error <> '' AND LOCATE(?, {fold}) > 0))
  AND (? IS NULL OR o.created_at >= TIMESTAMPADD(MICROSECOND, ?, '1970-01-01 00:00:00'))
  AND (? IS NULL OR o.created_at < TIMESTAMPADD(MICROSECOND, ?, '1970-01-01 00:00:00'))
ORDER BY o.id
LIMIT ?
