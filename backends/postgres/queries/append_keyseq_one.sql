-- append_keyseq.sql for a single entry (the common one-entry call): the
-- same steps from scalar parameters, without unnest, windows and sorts.
-- $1 id, $2 partition, $3 topic, $4 key, $5 payload, $6 headers,
-- $7 not_before, as in append_one.sql. The tail as in append_in_tx.sql.
WITH f AS (
    SELECT $1::text AS id, $2::integer AS partition, $3::text AS topic,
           coalesce($4::bytea, ''::bytea) AS key, $5::bytea AS payload,
           $6::bytea AS headers, $7::timestamptz AS not_before
    WHERE NOT EXISTS (SELECT 1 FROM {outbox} AS o WHERE o.id = $1::text)
), c AS (
    INSERT INTO {keyseq} AS k (key, last)
    SELECT f.key, 1 FROM f WHERE f.key <> ''::bytea
    ON CONFLICT (key) DO UPDATE SET last = k.last + 1
    RETURNING k.last
), t AS (
    SELECT clock_timestamp() AS now FROM (SELECT count(*) FROM c) AS w
), ins AS (
    INSERT INTO {outbox} AS o
        (id, partition, topic, key, payload, headers, not_before, created_at, next_at)
    SELECT f.id, f.partition, f.topic, f.key, f.payload,
           CASE WHEN c.last IS NULL THEN f.headers
                ELSE coalesce(f.headers, ''::bytea) || {keyseq_header}
                     || set_byte('\x00'::bytea, 0, octet_length(c.last::text))
                     || convert_to(c.last::text, 'UTF8')
           END,
           f.not_before, t.now, greatest(t.now, f.not_before)
    FROM t, f LEFT JOIN c ON true
    RETURNING o.partition
)
{append_tail}
