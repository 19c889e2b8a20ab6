-- OldestArchived: the earliest sent_at of the archive, NULL when it is
-- empty. One descent of the sent_at index (of each partition, for a
-- partitioned archive).
SELECT min(sent_at) FROM {archive}
