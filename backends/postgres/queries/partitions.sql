-- New: the partition count stored with the outbox (migration 004), and
-- whether the hold table of migration 006 exists ($1 its qualified name).
SELECT partitions, to_regclass($1) IS NOT NULL FROM {meta}
