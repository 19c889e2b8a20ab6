-- The head entries of the blocked keys, as common table expressions for
-- blocked_keys.sql and blocked_counts.sql (outbox.Lister.BlockedKeys):
-- for each partition and non-empty key whose earliest-appended pending
-- entry (lowest seq) was attempted, deferred or is of a paused topic,
-- that entry, with waiting (the key's other pending entries) and since
-- (the time of the oldest attempt in its history, else its created_at;
-- also when a hand-made UPDATE wrote a first time that does not parse).
-- key_hash (SHA-256 of the key) stands for the key throughout.
--
-- bk_cand: the keys that may be blocked: those with an entry that holds
-- back its key (pending, attempted or deferred: holds = 1; {partition_list}
-- is 0, 1, ..., Partitions()-1, so that this is a range read of the
-- hold-back index, (partition, holds) = (p, 1) for each p, of only the
-- entries that hold; rows of partitions out of range are never fetched,
-- so they block nothing) and, only while a
-- topic is paused (a one-time filter), those with a pending entry of a
-- paused topic (a pass over the table). The empty key's hash is left out.
-- bk_rows: the pending entries of those keys, found through the hold-back
-- index (partition, holds, key_hash, seq) by equality on each arm, holds
-- = 1 and holds = 0 (MySQL uses an index in a join only by equality on
-- its leading columns; STRAIGHT_JOIN keeps the few candidates as the
-- outer side, which the optimizer, estimating them from the whole index,
-- would otherwise not). bk_keys numbers them in seq order per key.
bk_cand AS (
    SELECT DISTINCT `partition`, key_hash FROM {outbox}
    WHERE `partition` IN ({partition_list}) AND holds = 1
      AND key_hash <> UNHEX(SHA2('', 256))
    UNION
    SELECT `partition`, key_hash FROM {outbox}
    WHERE EXISTS (SELECT 1 FROM {pause_topic})
      AND state = 'pending' AND key_hash <> UNHEX(SHA2('', 256))
      AND topic IN (SELECT topic FROM {pause_topic})
), bk_rows AS (
    SELECT STRAIGHT_JOIN o.* FROM bk_cand AS c
    JOIN {outbox} AS o ON o.`partition` = c.`partition` AND o.holds = 1 AND o.key_hash = c.key_hash
    UNION ALL
    SELECT STRAIGHT_JOIN o.* FROM bk_cand AS c
    JOIN {outbox} AS o ON o.`partition` = c.`partition` AND o.holds = 0 AND o.key_hash = c.key_hash
    WHERE o.state = 'pending'
), bk_keys AS (
    SELECT r.*,
           COUNT(*) OVER (PARTITION BY r.`partition`, r.key_hash) AS n,
           ROW_NUMBER() OVER (PARTITION BY r.`partition`, r.key_hash ORDER BY r.seq) AS rn
    FROM bk_rows AS r
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
