-- The trailing notification, an autocommit statement on the trailer's own
-- connection. $1 is the channel, $2 the IDs (pg_current_xact_id as bigint)
-- of the appending transactions that skipped their in-transaction
-- pg_notify, and $3/$4 parallel arrays pairing each of those IDs with each
-- partition its append inserted into. It sends the union of the partitions
-- of the transactions that committed, comma-separated and ascending, in
-- one NOTIFY per 700 partitions (PostgreSQL's payload limit is 8000 bytes),
-- and returns the IDs still in progress (checked again later) and how many
-- notifications it sent. Aborted ones are dropped: a rolled-back append
-- never causes a notification.
WITH s AS MATERIALIZED (
    SELECT x, pg_xact_status(x::text::xid8) AS status
    FROM unnest($2::bigint[]) AS x
), p AS (
    SELECT DISTINCT a.p
    FROM unnest($3::bigint[], $4::integer[]) AS a(x, p)
    JOIN s ON s.x = a.x AND s.status = 'committed'
), n AS (
    SELECT pg_notify($1, string_agg(c.p::text, ',' ORDER BY c.p))
    FROM (SELECT p, (row_number() OVER (ORDER BY p) - 1) / 700 AS chunk FROM p) AS c
    GROUP BY c.chunk
)
SELECT coalesce((SELECT array_agg(x) FROM s WHERE status = 'in progress'), '{}'::bigint[]),
       (SELECT count(*) FROM n)
