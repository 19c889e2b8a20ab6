-- AppendInTx and AppendInSQLTx with Options.KeySequence: append_in_tx.sql
-- plus the per-key sequence numbers, in the same one statement. $1..$7
-- are parallel arrays as in append_in_tx.sql; the tail is the same.
--
-- f: the rows to insert: the first occurrence of each ID in the call
--    whose ID is not in the outbox yet (an idempotent re-append takes no
--    number), with their rank within their key (rk) and their key's count
--    (nk) in the call.
-- c: one counter row per distinct non-empty key of f, upserted in key
--    order (the row locks serialize appends of one key and never deadlock
--    between two single-call appends), returning the key's new last
--    number: the call's entries of the key get last - nk + 1 .. last.
-- t: an aggregate of c, so the clock is read once c is done (after any
--    wait for a key's lock): an append that waited is due after the
--    append it waited for (the claim orders by next_at). It holds c's
--    numbers in a jsonb object by hex key, looked up per row by binary
--    search, instead of a join of f and c, which the planner makes a
--    nested loop (10,000 bytea comparisons for 100 keys).
-- ins: the rows, the number appended to the encoded headers as one more
--    header ({keyseq_header} is uvarint(len(name)) || name, then
--    uvarint(len(value)) || value: a number has at most 19 digits, so its
--    length is one byte). No ON CONFLICT: f already left out every ID that
--    was visible, so a conflict means a concurrent transaction appended
--    the ID and committed while this one waited; skipping the row would
--    leave its number unused, so the statement fails (23505) instead.
WITH e AS (
    SELECT u.id, u.partition, u.topic, coalesce(u.key, ''::bytea) AS key, u.payload,
           u.headers, u.not_before, u.ord,
           min(u.ord) OVER (PARTITION BY u.id) AS first
    FROM unnest($1::text[], $2::integer[], $3::text[], $4::bytea[], $5::bytea[],
                $6::bytea[], $7::timestamptz[])
             WITH ORDINALITY AS u(id, partition, topic, key, payload, headers, not_before, ord)
), f AS (
    SELECT e.*,
           row_number() OVER (PARTITION BY e.key ORDER BY e.ord) AS rk,
           count(*) OVER (PARTITION BY e.key) AS nk
    FROM e
    WHERE e.ord = e.first
      AND NOT EXISTS (SELECT 1 FROM {outbox} AS o WHERE o.id = e.id)
), c AS (
    INSERT INTO {keyseq} AS k (key, last)
    SELECT f.key, count(*) FROM f WHERE f.key <> ''::bytea GROUP BY f.key ORDER BY f.key
    ON CONFLICT (key) DO UPDATE SET last = k.last + EXCLUDED.last
    RETURNING k.key, k.last
), t AS (
    SELECT clock_timestamp() AS now,
           jsonb_object_agg(encode(c.key, 'hex'), c.last) AS last
    FROM c
), ins AS (
    INSERT INTO {outbox} AS o
        (id, partition, topic, key, payload, headers, not_before, created_at, next_at)
    SELECT f.id, f.partition, f.topic, f.key, f.payload,
           CASE WHEN f.key = ''::bytea THEN f.headers
                ELSE coalesce(f.headers, ''::bytea) || {keyseq_header}
                     || set_byte('\x00'::bytea, 0, octet_length(n.num))
                     || convert_to(n.num, 'UTF8')
           END,
           f.not_before, t.now, greatest(t.now, f.not_before)
    FROM t, f,
         LATERAL (SELECT ((t.last ->> encode(f.key, 'hex'))::bigint - f.nk + f.rk)::text AS num) AS n
    ORDER BY f.ord
    RETURNING o.partition
)
{append_tail}
