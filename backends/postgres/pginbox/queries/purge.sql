-- Purge: $1 timestamptz the horizon, $2 integer the limit. In one
-- statement (one transaction): deletes at most $2 recorded IDs applied
-- before $1, oldest first (a range scan of the applied_at index), and at
-- most $2 key sequence numbers last set before $1 (the updated_at index),
-- skipping rows another transaction holds (SKIP LOCKED: Purge never waits
-- for a consumer); returns how many of each it deleted.
WITH ids AS (
    DELETE FROM "inbox" WHERE id IN (
        SELECT id FROM "inbox" WHERE applied_at < $1::timestamptz
        ORDER BY applied_at LIMIT $2::integer
        FOR UPDATE SKIP LOCKED)
    RETURNING 1
), keys AS (
    DELETE FROM "inbox_keyseq" WHERE key IN (
        SELECT key FROM "inbox_keyseq" WHERE updated_at < $1::timestamptz
        ORDER BY updated_at LIMIT $2::integer
        FOR UPDATE SKIP LOCKED)
    RETURNING 1
)
SELECT (SELECT count(*) FROM ids), (SELECT count(*) FROM keys)
