-- The head entries of the blocked keys, as common table expressions for
-- blocked_keys.sql and partition_stats.sql (outbox.Lister.BlockedKeys):
-- for each partition and non-empty key whose earliest-appended pending
-- entry (lowest seq) was attempted, deferred or is of a paused topic,
-- that entry, with waiting (the key's other pending entries) and since
-- (the time of the oldest attempt in its history, else its created_at;
-- also when a hand-made UPDATE wrote a history whose first time is not as
-- MarkFailed writes it, so that such a row cannot fail the statement).
--
-- bk_cand: the keys that may be blocked: those with a pending entry that
-- was attempted or deferred (the hold-back index, small) and, only while
-- a topic is paused (a one-time filter), those with a pending entry of a
-- paused topic (a pass over the pending rows). bk_keys: the pending
-- entries of those keys (one pass over the pending rows, hashed against
-- bk_cand; skipped when bk_cand is empty), numbered in seq order.
bk_pt AS MATERIALIZED (
    SELECT topic FROM {pause_topic}
), bk_cand AS (
    SELECT partition, key FROM {outbox}
    WHERE (attempts > 0 OR deferred) AND state = 'pending' AND key <> ''::bytea
    UNION
    SELECT partition, key FROM {outbox}
    WHERE state = 'pending' AND key <> ''::bytea AND EXISTS (SELECT 1 FROM bk_pt)
      AND topic IN (SELECT topic FROM bk_pt)
), bk_keys AS (
    SELECT o.*, count(*) OVER w AS n, row_number() OVER (w ORDER BY o.seq) AS rn
    FROM {outbox} AS o
    JOIN bk_cand AS c ON c.partition = o.partition AND c.key = o.key
    WHERE o.state = 'pending'
    WINDOW w AS (PARTITION BY o.partition, o.key)
), bk_heads AS (
    SELECT k.*, k.n - 1 AS waiting,
           coalesce(CASE WHEN k.history -> 0 ->> 'at' ~ '^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z$'
                         THEN (k.history -> 0 ->> 'at')::timestamptz END,
                    k.created_at) AS since
    FROM bk_keys AS k
    WHERE k.rn = 1 AND (k.attempts > 0 OR k.deferred OR k.topic IN (SELECT topic FROM bk_pt))
)
