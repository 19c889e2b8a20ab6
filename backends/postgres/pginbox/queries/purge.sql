-- Purge: $1 timestamptz the horizon, $2 integer the limit. In one
-- statement (one transaction): deletes at most $2 recorded IDs applied
-- before $1, oldest first (a range scan of the applied_at index), and at
-- most $2 key sequence numbers last set before $1 (the updated_at index),
-- skipping rows another transaction holds (SKIP LOCKED: Purge never waits
-- for a consumer); returns how many of each it deleted. "= ANY(ARRAY(
-- subquery))" makes the chosen rows an array computed once, then deleted
-- through the primary key; "IN (subquery)" is planned as a semi join
-- that scans the whole table.
WITH ids AS (
    DELETE FROM "inbox" WHERE id = ANY(ARRAY(
        SELECT id FROM "inbox" WHERE applied_at < $1::timestamptz
        ORDER BY applied_at LIMIT $2::integer
        FOR UPDATE SKIP LOCKED))
    RETURNING 1
), keys AS (
    DELETE FROM "inbox_keyseq" WHERE key = ANY(ARRAY(
        SELECT key FROM "inbox_keyseq" WHERE updated_at < $1::timestamptz
        ORDER BY updated_at LIMIT $2::integer
        FOR UPDATE SKIP LOCKED))
    RETURNING 1
)
SELECT (SELECT count(*) FROM ids), (SELECT count(*) FROM keys)
