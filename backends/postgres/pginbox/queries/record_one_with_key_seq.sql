-- RecordWithKeySeqs of one ID and one key (the Inbox's Handle of a
-- numbered message): $1 text the ID, $2 text the key. The rows and locks
-- of record_with_key_seqs.sql, without its unnest, grouping and join:
-- 'r' with position 1 when the ID was new; 'k' with the key's number when
-- it has one above 0 (a placeholder row, seq 0, is created and locked for
-- a new key, and reported absent).
WITH inserted AS (
    INSERT INTO "inbox" (id) VALUES ($1)
    ON CONFLICT (id) DO NOTHING
    RETURNING 1::bigint AS ord
), locked AS (
    INSERT INTO "inbox_keyseq" AS k (key, seq) VALUES ($2, 0)
    ON CONFLICT (key) DO UPDATE SET seq = k.seq
    RETURNING k.key, k.seq
)
SELECT 'r' AS kind, ord, NULL::text AS key, NULL::bigint AS seq FROM inserted
UNION ALL
SELECT 'k', NULL, key, seq FROM locked WHERE seq > 0
