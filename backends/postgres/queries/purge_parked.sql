-- PurgeParked: $1 parked before, $2 limit. Deletes at most $2 parked
-- entries whose park time (parked_at, migration 008) is before $1, oldest
-- park first, walking the partial index "<table>_parked_at_idx". Rows
-- another transaction holds (a Requeue, a Cancel) are skipped (SKIP
-- LOCKED), never waited for; the DELETE checks the state and park time
-- again. Entries that are not parked, or parked without a park time (a
-- hand-made UPDATE), are never deleted. A deleted parked entry is gone as
-- a cancelled one is (cancel.sql): the key sequence and the hold are not
-- touched. Returns the IDs deleted.
WITH s AS (
    SELECT o.id
    FROM {outbox} AS o
    WHERE o.state = 'parked' AND o.parked_at < $1
    ORDER BY o.parked_at
    LIMIT $2
    FOR UPDATE SKIP LOCKED
)
DELETE FROM {outbox} AS o
USING s
WHERE o.id = s.id AND o.state = 'parked' AND o.parked_at < $1
RETURNING o.id
