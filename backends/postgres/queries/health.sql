-- Health: the figures of the outbox's tables and what keeps autovacuum from
-- cleaning them, in one statement that reads only the catalogue and the
-- statistics (no table is scanned, no lock is taken beyond AccessShare on
-- the catalogue).
--
-- $1 text[]  the tables to report, quoted and schema-qualified
--            (to_regclass input), in report order; a missing one is left out
-- $2 float8  the xmin-horizon bound in seconds: sessions and prepared
--            transactions older than it are returned; NULL returns none
--
-- One row: autovacuum, track_counts (the server settings), now (the
-- database's clock), all_stats (this role sees every session's
-- xact_start: superuser or member of pg_read_all_stats), tables, holders
-- and slots (JSON arrays, see health.go).
--
-- A table's figures are summed over its leaf partitions when it is
-- partitioned (pg_partition_tree), and read with the functions behind
-- pg_stat_user_tables on its own OIDs (the view would compute every table
-- of the database). disabled lists the relations (the table, a partition,
-- a TOAST table) whose reloptions turn autovacuum off, as PostgreSQL
-- parses them (the value cast to boolean).
WITH rels AS (
    SELECT a.ord, to_regclass(a.name) AS rel
    FROM unnest($1::text[]) WITH ORDINALITY AS a(name, ord)
), leaves AS (
    -- Every lookup of pg_class below is a scalar subquery by OID (an index
    -- scan): as joins, the planner's estimate of the functions' rows (1000)
    -- made it hash the whole of pg_class, which is slow in a database of
    -- many tables.
    SELECT rels.ord, p.relid
    FROM rels CROSS JOIN LATERAL pg_partition_tree(rels.rel) p
    WHERE rels.rel IS NOT NULL AND p.isleaf
    UNION
    SELECT rels.ord, rels.rel
    FROM rels
    WHERE rels.rel IS NOT NULL AND (SELECT c.relkind FROM pg_class c WHERE c.oid = rels.rel) <> 'p'
), leaf AS (
    SELECT l.ord, l.relid,
           (SELECT format('%I.%I', n.nspname, c.relname)
            FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
            WHERE c.oid = l.relid) AS name,
           (SELECT c.reloptions FROM pg_class c WHERE c.oid = l.relid) AS own,
           (SELECT t.reloptions FROM pg_class t
            WHERE t.oid = (SELECT c.reltoastrelid FROM pg_class c WHERE c.oid = l.relid)) AS toast
    FROM leaves l
), figures AS (
    SELECT l.ord,
           sum(pg_total_relation_size(l.relid))::bigint AS bytes,
           sum(pg_stat_get_live_tuples(l.relid))::bigint AS live,
           sum(pg_stat_get_dead_tuples(l.relid))::bigint AS dead,
           max(greatest(pg_stat_get_last_vacuum_time(l.relid), pg_stat_get_last_autovacuum_time(l.relid))) AS last_vacuum,
           sum(pg_stat_get_vacuum_count(l.relid) + pg_stat_get_autovacuum_count(l.relid))::bigint AS vacuums,
           coalesce(array_agg(l.name) FILTER (WHERE off.own), '{}') ||
           coalesce(array_agg(l.name || ' (its TOAST table)') FILTER (WHERE off.toast), '{}') AS disabled
    FROM leaf l
    CROSS JOIN LATERAL (SELECT
        EXISTS (SELECT 1 FROM pg_options_to_table(l.own) o
                WHERE o.option_name = 'autovacuum_enabled' AND NOT o.option_value::boolean) AS own,
        EXISTS (SELECT 1 FROM pg_options_to_table(l.toast) o
                WHERE o.option_name = 'autovacuum_enabled' AND NOT o.option_value::boolean) AS toast) off
    GROUP BY l.ord
), holders AS (
    -- Sessions of this database with a snapshot or a transaction ID:
    -- either holds back what vacuum may remove here. Background processes
    -- (no user: autovacuum workers and the like) are left out. age is NULL
    -- when this role cannot see the session's xact_start.
    SELECT 'session' AS kind, a.pid::text AS id, a.application_name AS app, a.usename AS owner,
           a.state, extract(epoch FROM now() - a.xact_start)::float8 AS age,
           greatest(age(a.backend_xid), age(a.backend_xmin))::bigint AS xids,
           coalesce(a.backend_xid, a.backend_xmin)::text AS xmin
    FROM pg_stat_activity a
    WHERE a.datname = current_database()
      AND a.pid <> pg_backend_pid()
      AND a.usesysid IS NOT NULL
      AND a.backend_type IS DISTINCT FROM 'autovacuum worker'
      AND (a.backend_xmin IS NOT NULL OR a.backend_xid IS NOT NULL)
      AND $2::float8 IS NOT NULL
      AND (a.xact_start IS NULL OR a.xact_start < now() - make_interval(secs => $2::float8))
    UNION ALL
    -- Prepared transactions of this database: they hold their transaction
    -- ID until COMMIT PREPARED or ROLLBACK PREPARED, also across restarts.
    SELECT 'prepared', p.gid, '', p.owner, '',
           extract(epoch FROM now() - p.prepared)::float8, age(p.transaction)::bigint, p.transaction::text
    FROM pg_prepared_xacts p
    WHERE p.database = current_database()
      AND $2::float8 IS NOT NULL
      AND p.prepared < now() - make_interval(secs => $2::float8)
    UNION ALL
    -- Replication slots holding xmin (a standby's hot_standby_feedback):
    -- that holds back vacuum in every database. catalog_xmin (logical
    -- slots) holds back only the system catalogues, not the outbox. A slot
    -- has no start time: age is NULL, health.go times it.
    SELECT 'slot', s.slot_name::text, '', '', CASE WHEN s.active THEN 'active' ELSE 'inactive' END,
           NULL, age(s.xmin)::bigint, s.xmin::text
    FROM pg_replication_slots s
    WHERE s.xmin IS NOT NULL
      AND $2::float8 IS NOT NULL
)
SELECT current_setting('autovacuum'),
       current_setting('track_counts'),
       now(),
       (SELECT rolsuper FROM pg_roles WHERE rolname = current_user)
           OR pg_has_role(current_user, 'pg_read_all_stats', 'USAGE'),
       coalesce((SELECT json_agg(json_build_object(
                    'ord', f.ord, 'bytes', f.bytes, 'live', f.live, 'dead', f.dead,
                    'last_vacuum', f.last_vacuum, 'vacuums', f.vacuums, 'disabled', f.disabled)
                  ORDER BY f.ord) FROM figures f), '[]'),
       coalesce((SELECT json_agg(json_build_object(
                    'kind', h.kind, 'id', h.id, 'app', h.app, 'owner', h.owner, 'state', h.state,
                    'age', h.age, 'xids', h.xids, 'xmin', h.xmin)
                  ORDER BY h.age DESC NULLS LAST, h.xids DESC) FROM holders h), '[]')
