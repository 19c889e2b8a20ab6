-- New: the partition count stored with the outbox (migration 004), and
-- whether the paused-topic table of migration 007 exists ($1 its
-- qualified name).
SELECT partitions, to_regclass($1) IS NOT NULL FROM {meta}
