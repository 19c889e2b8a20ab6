-- The head entries of the blocked keys, as common table expressions for
-- blocked_keys.sql and blocked_counts.sql (outbox.Lister.BlockedKeys):
-- for each partition and non-empty key whose earliest-appended pending
-- entry (lowest seq) was attempted, deferred or is of a paused topic,
-- that entry, with waiting (the key's other pending entries) and since
-- (the time of the oldest attempt in its history, else its created_at;
-- also when a hand-made UPDATE wrote a first time that does not parse).
--
-- bk_cand: the keys that may be blocked: those with an entry that holds
-- (pending, attempted or deferred; the holds column) and those with a
-- pending entry of a paused topic. bk_keys: the pending entries of those
-- keys, numbered in seq order per key (key_hash stands for the key: a
-- sort on the 4096-byte key would compare only max_sort_length bytes;
-- the join compares the key itself).
bk_cand AS (
    SELECT DISTINCT `partition`, key_hash, `key` FROM {outbox}
    WHERE holds = 1 AND `key` <> ''
    UNION
    SELECT `partition`, key_hash, `key` FROM {outbox}
    WHERE state = 'pending' AND `key` <> ''
      AND topic IN (SELECT topic FROM {pause_topic})
), bk_keys AS (
    SELECT o.*,
           COUNT(*) OVER (PARTITION BY o.`partition`, o.key_hash) AS n,
           ROW_NUMBER() OVER (PARTITION BY o.`partition`, o.key_hash ORDER BY o.seq) AS rn
    FROM {outbox} AS o
    JOIN bk_cand AS c
      ON c.`partition` = o.`partition` AND c.key_hash = o.key_hash AND c.`key` = o.`key`
    WHERE o.state = 'pending'
), bk_heads AS (
    SELECT k.*, k.n - 1 AS waiting,
           COALESCE(CASE WHEN JSON_UNQUOTE(JSON_EXTRACT(k.history, '$[0].at'))
                              REGEXP '^[0-9]{4}-[0-9]{2}-[0-9]{2}[T ][0-9]{2}:[0-9]{2}:[0-9]{2}([.][0-9]{1,6})?Z?$'
                         THEN CAST(REPLACE(REPLACE(JSON_UNQUOTE(JSON_EXTRACT(k.history, '$[0].at')), 'T', ' '), 'Z', '') AS DATETIME(6))
                    END,
                    k.created_at) AS since
    FROM bk_keys AS k
    WHERE k.rn = 1
      AND (k.attempts > 0 OR k.deferred <> 0 OR k.topic IN (SELECT topic FROM {pause_topic}))
)
