-- AppendInTx of a single entry (the common one-entry call): the same row
-- as append_in_tx.sql from scalar parameters, without unnest, ordinality
-- and sort. $1 id, $2 partition, $3 topic, $4 key, $5 payload, $6 headers,
-- $7 not_before. The tail as in append_in_tx.sql ($8 the channel).
WITH ins AS (
    INSERT INTO {outbox} AS o
        (id, partition, topic, key, payload, headers, not_before, created_at, next_at)
    SELECT $1::text, $2::integer, $3::text, coalesce($4::bytea, ''::bytea), $5::bytea,
           $6::bytea, $7::timestamptz, t.now, greatest(t.now, $7::timestamptz)
    FROM (SELECT clock_timestamp() AS now) AS t
    ON CONFLICT (id) DO NOTHING
    RETURNING o.partition
)
{append_tail}
