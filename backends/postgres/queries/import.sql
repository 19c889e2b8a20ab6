-- Import: one statement. $1..$12 are parallel arrays, one element per
-- entry in slice order: $1 id, $2 partition, $3 topic, $4 key, $5 payload,
-- $6 headers, $7 not_before, $8 created_at (NULL: now), $9 attempts,
-- $10 last_error, $11 parked, $12 due_at (NULL: due now), $14 history
-- (the JSON of the history column, NULL: none), $15 deferred; $13 the
-- import sequence's qualified name. Returns how many rows were inserted.
--
-- n: one value of the import sequence per entry, ranked, so the entries
--    get them in slice order whatever order nextval runs in (negative:
--    below every appended seq).
-- t: the bound a due entry's due time is lowered to: the time the outbox
--    was first held, or now() when it is not held.
-- ins: a due entry (due_at NULL or not after now(); or never attempted,
--    without not_before, so due at its source since its append, and due_at
--    less than a minute ahead of now(): the two clocks' skew, as the Redis
--    backend's import.lua takes it) gets the earlier of
--    its due time and the bound; an entry due later keeps its due time. A
--    parked entry's next_at is the bound (unused until Requeue sets it),
--    and its parked_at (migration 008) the import time.
--    ON CONFLICT (id) DO NOTHING skips IDs already stored (imported or
--    appended) and, rows being inserted in slice order, an ID repeated in
--    the call after its first occurrence.
WITH e AS (
    SELECT u.*, row_number() OVER (ORDER BY u.ord) AS rn
    FROM unnest($1::text[], $2::integer[], $3::text[], $4::bytea[], $5::bytea[],
                $6::bytea[], $7::timestamptz[], $8::timestamptz[], $9::integer[],
                $10::text[], $11::boolean[], $12::timestamptz[], $14::text[], $15::boolean[])
             WITH ORDINALITY AS u(id, partition, topic, key, payload, headers, not_before,
                                  created_at, attempts, last_error, parked, due_at,
                                  history, deferred, ord)
), n AS (
    SELECT s.seq, row_number() OVER (ORDER BY s.seq) AS rn
    FROM (SELECT nextval($13::regclass) AS seq FROM e) AS s
), t AS (
    SELECT now() AS now, coalesce((SELECT h.since FROM {hold} AS h), now()) AS bound
), ins AS (
    INSERT INTO {outbox} AS o
        (seq, id, partition, topic, key, payload, headers, not_before, created_at,
         next_at, attempts, state, last_error, history, deferred, parked_at)
    SELECT n.seq, e.id, e.partition, e.topic, coalesce(e.key, ''::bytea), e.payload,
           e.headers, e.not_before, coalesce(e.created_at, t.now),
           CASE WHEN e.parked OR e.due_at IS NULL OR e.due_at <= t.now
                     OR (e.attempts = 0 AND e.not_before IS NULL
                         AND e.due_at <= t.now + interval '1 minute')
                THEN least(coalesce(e.due_at, t.bound), t.bound)
                ELSE e.due_at
           END,
           e.attempts, CASE WHEN e.parked THEN 'parked' ELSE 'pending' END, e.last_error,
           e.history::jsonb, e.deferred AND NOT e.parked,
           CASE WHEN e.parked THEN t.now END
    FROM t, e JOIN n USING (rn)
    ORDER BY e.ord
    ON CONFLICT (id) DO NOTHING
    RETURNING 1
)
SELECT count(*) FROM ins
