-- OldestArchived: the earliest sent_at of the archive, as microseconds
-- since the Unix epoch (NULL when the archive is empty). MIN of the
-- sent_at index's first key: one index dive, whatever the archive's size.
SELECT TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', MIN(sent_at)) FROM {archive}
