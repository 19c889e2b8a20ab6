-- The trailing notification, an autocommit statement from the pool. $1 is
-- the channel, $2 the IDs (pg_current_xact_id as bigint) of the appending
-- transactions that skipped their in-transaction pg_notify. It sends one
-- NOTIFY when any of them committed, and returns the IDs still in
-- progress (checked again later) and whether it notified. Aborted ones are
-- dropped: a rolled-back append never causes a notification.
SELECT coalesce(array_agg(s.x) FILTER (WHERE s.status = 'in progress'), '{}'::bigint[]),
       CASE WHEN bool_or(s.status = 'committed')
            THEN pg_notify($1, '')::text IS NOT NULL
            ELSE false END
FROM (SELECT x, pg_xact_status(x::text::xid8) AS status
      FROM unnest($2::bigint[]) AS x) AS s
