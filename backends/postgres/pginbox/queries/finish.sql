-- Finish: SetKeySeqs' statement (set_key_seqs.sql, $1 keys, $2 numbers)
-- and SaveOffsets' (save_offsets.sql, $3 groups, $4 topics, $5
-- partitions, $6 next offsets) in one; either pair of arrays may be
-- empty. Data-modifying CTEs run to completion even when the query does
-- not read them.
WITH seqs AS (
    INSERT INTO "inbox_keyseq" AS k (key, seq, updated_at)
    SELECT key, seq, now() FROM unnest($1::text[], $2::bigint[]) AS u(key, seq)
    ON CONFLICT (key) DO UPDATE SET seq = EXCLUDED.seq, updated_at = EXCLUDED.updated_at
), offsets AS (
    INSERT INTO "inbox_offsets" (grp, topic, part, next)
    SELECT grp, topic, part, next FROM unnest($3::text[], $4::text[], $5::integer[], $6::bigint[]) AS u(grp, topic, part, next)
    ON CONFLICT (grp, topic, part) DO UPDATE SET next = EXCLUDED.next
)
SELECT 1
