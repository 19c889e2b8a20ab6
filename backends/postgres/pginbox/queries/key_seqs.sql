-- KeySeqs: $1 text[] the keys. Locks each key's row in byte order,
-- creating it with seq 0 ("none yet") when the key has none, and returns
-- the keys whose seq is set. A plain SELECT ... FOR UPDATE would lock
-- nothing for a key without a row, and two transactions could then both
-- take it as new; the upsert makes the second wait for the first and, in
-- READ COMMITTED, see what it committed (ON CONFLICT DO UPDATE acts on
-- the newest committed row version; under REPEATABLE READ or
-- SERIALIZABLE a version newer than the snapshot is a serialization
-- failure, 40001, which Retryable reports). The lock's update changes no
-- indexed column (updated_at stays): a HOT update.
WITH locked AS (
    INSERT INTO "inbox_keyseq" AS k (key, seq)
    SELECT DISTINCT key COLLATE "C", 0::bigint FROM unnest($1::text[]) AS u(key) ORDER BY 1
    ON CONFLICT (key) DO UPDATE SET seq = k.seq
    RETURNING k.key, k.seq
)
SELECT key, seq FROM locked WHERE seq > 0
