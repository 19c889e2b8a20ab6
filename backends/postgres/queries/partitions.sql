-- New: the partition count stored with the outbox (migration 004).
SELECT partitions FROM {meta}
