-- Oldest: no parameters. The earliest of the oldest recorded ID's
-- applied_at and the oldest key number's updated_at, each the first entry
-- of its index (min() on an indexed column is one index probe, not a
-- scan); NULL when both tables are empty (least() skips a NULL).
SELECT least((SELECT min(applied_at) FROM "inbox"), (SELECT min(updated_at) FROM "inbox_keyseq"))
