-- Record of one ID (the Inbox's Handle): $1 text. Record's statement
-- (record.sql) unnests, groups and joins for any number of IDs; for one
-- it is a plain insert, which the benchmark measured 0.05 ms faster per
-- transaction (a tenth of a plain transaction's time). Returns 1 (the
-- ID's position) when the ID was new, no row when it was recorded; it
-- waits for an uncommitted insert of the same ID as record.sql does.
INSERT INTO "inbox" (id) VALUES ($1)
ON CONFLICT (id) DO NOTHING
RETURNING 1::bigint
