-- AppendInTx: the whole batch in one statement. $1..$7 are parallel arrays
-- (one element per entry, in slice order). One clock reading per call: the
-- entries of a call share created_at and, unless scheduled, next_at; seq
-- (assigned in ORDER BY ord order) keeps them in slice order.
-- The last step (the tail, which replaces the token at the end) is chosen
-- per call (see appendTails in backend.go): a pg_notify($8, '<partitions>')
-- delivered by PostgreSQL at commit, listing the distinct partitions of the
-- inserted rows (split over several notifications past 700 partitions), or
-- the transaction's ID and those partitions for a trailing notification,
-- or nothing; each only when a row was inserted. ins returns the partition
-- of each inserted row.
WITH ins AS (
    INSERT INTO {outbox} AS o
        (id, partition, topic, key, payload, headers, not_before, created_at, next_at)
    SELECT e.id, e.partition, e.topic, coalesce(e.key, ''::bytea), e.payload,
           e.headers, e.not_before, t.now, greatest(t.now, e.not_before)
    FROM (SELECT clock_timestamp() AS now) AS t,
         unnest($1::text[], $2::integer[], $3::text[], $4::bytea[], $5::bytea[],
                $6::bytea[], $7::timestamptz[])
             WITH ORDINALITY AS e(id, partition, topic, key, payload, headers, not_before, ord)
    ORDER BY e.ord
    ON CONFLICT (id) DO NOTHING
    RETURNING o.partition
)
{append_tail}
