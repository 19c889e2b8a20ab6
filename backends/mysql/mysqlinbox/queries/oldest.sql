-- Oldest: no parameters. Microseconds since the Unix epoch (UTC) of the
-- earliest of the oldest recorded ID's applied_at and the oldest key
-- number's updated_at, each the first entry of its index (MIN() of an
-- indexed column is one index probe); NULL when both tables are empty.
-- LEAST() of a NULL is NULL in MySQL and MariaDB, hence the COALESCEs.
SELECT TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', LEAST(COALESCE(i.t, k.t), COALESCE(k.t, i.t)))
FROM (SELECT MIN(applied_at) AS t FROM {inbox}) AS i,
     (SELECT MIN(updated_at) AS t FROM {keyseq}) AS k
