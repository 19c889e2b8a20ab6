-- RecordWithKeySeqs: $1 text[] the IDs, $2 text[] the keys (repeats
-- allowed). Record's statement (record.sql) and KeySeqs' (key_seqs.sql) in
-- one: the IDs are inserted first (the rows of the first branch of the
-- UNION ALL pull the insert to completion before the second branch runs
-- the key upsert), so locks are taken in the order the two statements
-- take them. Rows: ('r', position of a new ID, NULL, NULL) and ('k', NULL,
-- key, seq) for each key whose seq is set.
WITH input AS (
    SELECT id, min(ord) AS ord
    FROM unnest($1::text[]) WITH ORDINALITY AS u(id, ord)
    GROUP BY id
), inserted AS (
    INSERT INTO "inbox" (id)
    SELECT id FROM input ORDER BY id COLLATE "C"
    ON CONFLICT (id) DO NOTHING
    RETURNING id
), locked AS (
    INSERT INTO "inbox_keyseq" AS k (key, seq)
    SELECT DISTINCT key COLLATE "C", 0::bigint FROM unnest($2::text[]) AS u(key) ORDER BY 1
    ON CONFLICT (key) DO UPDATE SET seq = k.seq
    RETURNING k.key, k.seq
)
SELECT 'r' AS kind, input.ord, NULL::text AS key, NULL::bigint AS seq FROM input JOIN inserted USING (id)
UNION ALL
SELECT 'k', NULL, key, seq FROM locked WHERE seq > 0
