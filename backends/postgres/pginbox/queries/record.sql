-- Record: $1 text[] the IDs. Inserts each distinct ID, in byte order (so
-- transactions recording overlapping IDs take their row locks in one
-- order), skips those already recorded (ON CONFLICT DO NOTHING waits for
-- an uncommitted insert of the same ID and skips it when that commits),
-- and returns the 1-based position in $1 of the first occurrence of each
-- ID it inserted: the new ones.
WITH input AS (
    SELECT id, min(ord) AS ord
    FROM unnest($1::text[]) WITH ORDINALITY AS u(id, ord)
    GROUP BY id
), inserted AS (
    INSERT INTO "inbox" (id)
    SELECT id FROM input ORDER BY id COLLATE "C"
    ON CONFLICT (id) DO NOTHING
    RETURNING id
)
SELECT input.ord FROM input JOIN inserted USING (id)
