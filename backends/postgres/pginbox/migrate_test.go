package pginbox_test

import (
	"context"
	"io/fs"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	pgoutbox "github.com/outboxrelay/outbox/backends/postgres"
	"github.com/outboxrelay/outbox/backends/postgres/pginbox"
)

// tables lists the tables of schema, sorted.
func tables(t *testing.T, schema string) []string {
	t.Helper()
	rows, err := pool(t).Query(watchdog(t), "SELECT tablename FROM pg_tables WHERE schemaname = $1 ORDER BY tablename", schema)
	require.NoError(t, err)
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	return names
}

// versions reads the versions recorded in <table>_migrations.
func versions(t *testing.T, opts pginbox.Options) []int {
	t.Helper()
	rows, err := pool(t).Query(watchdog(t), "SELECT version FROM "+pgx.Identifier{opts.Schema, cmpOr(opts.Table, "inbox") + "_migrations"}.Sanitize()+" ORDER BY version")
	require.NoError(t, err)
	vs, err := pgx.CollectRows(rows, pgx.RowTo[int])
	require.NoError(t, err)
	return vs
}

func cmpOr(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

func schemaExists(t *testing.T, schema string) bool {
	t.Helper()
	var ok bool
	require.NoError(t, pool(t).QueryRow(watchdog(t), "SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)", schema).Scan(&ok))
	return ok
}

// TestMigrateUpDownIdempotent: Migrate creates the schema and the four
// tables, again changes nothing, MigrateDown drops them and the schema it
// created, and again does nothing.
func TestMigrateUpDownIdempotent(t *testing.T) {
	t.Parallel()
	ctx := watchdog(t)
	p := pool(t)
	opts := pginbox.Options{Schema: freshSchema(t), Table: "events_inbox"}
	require.NoError(t, pginbox.Migrate(ctx, p, opts))
	want := []string{"events_inbox", "events_inbox_keyseq", "events_inbox_migrations", "events_inbox_offsets"}
	require.Equal(t, want, tables(t, opts.Schema))
	require.Equal(t, []int{pginbox.LatestVersion()}, versions(t, opts))
	require.NoError(t, pginbox.Migrate(ctx, p, opts), "a second Migrate")
	require.Equal(t, []int{1}, versions(t, opts))

	s, err := pginbox.New(p, opts)
	require.NoError(t, err)
	require.Equal(t, []bool{true}, record(t, s, "x"), "the store works on the migrated tables")

	require.NoError(t, pginbox.MigrateDown(ctx, p, opts))
	require.False(t, schemaExists(t, opts.Schema), "the schema Migrate created, and empty, is dropped")
	require.NoError(t, pginbox.MigrateDown(ctx, p, opts), "MigrateDown of nothing")
	require.NoError(t, pginbox.Migrate(ctx, p, opts), "Migrate after MigrateDown")
	require.Equal(t, want, tables(t, opts.Schema))
}

// TestMigrateDownKeepsOthers: MigrateDown leaves a schema it did not
// create, and one that holds an outbox, with the outbox in it.
func TestMigrateDownKeepsOthers(t *testing.T) {
	t.Parallel()
	ctx := watchdog(t)
	p := pool(t)
	mine := freshSchema(t)
	_, err := p.Exec(ctx, "CREATE SCHEMA "+pgx.Identifier{mine}.Sanitize())
	require.NoError(t, err)
	require.NoError(t, pginbox.Migrate(ctx, p, pginbox.Options{Schema: mine}))
	require.NoError(t, pginbox.MigrateDown(ctx, p, pginbox.Options{Schema: mine}))
	require.True(t, schemaExists(t, mine), "a schema Migrate did not create stays")
	require.Empty(t, tables(t, mine))

	shared := freshSchema(t)
	require.NoError(t, pginbox.Migrate(ctx, p, pginbox.Options{Schema: shared}))
	require.NoError(t, pgoutbox.Migrate(ctx, p, pgoutbox.Options{Schema: shared, Partitions: 2}))
	require.NoError(t, pginbox.MigrateDown(ctx, p, pginbox.Options{Schema: shared}))
	require.True(t, schemaExists(t, shared), "the schema holds the outbox")
	for _, name := range tables(t, shared) {
		require.True(t, strings.HasPrefix(name, "outbox"), "left %s", name)
	}
	require.NoError(t, pgoutbox.MigrateTo(ctx, p, pgoutbox.Options{Schema: shared}, 0))
	require.True(t, schemaExists(t, shared), "pgoutbox keeps a schema it did not create")
	require.NoError(t, pginbox.MigrateDown(ctx, p, pginbox.Options{Schema: shared}))
	require.False(t, schemaExists(t, shared), "a second MigrateDown drops the now empty schema the inbox created")
}

// TestMigrateConcurrent: replicas migrating one new schema at once all
// succeed (the advisory lock serializes them, schema creation included),
// and the migration is recorded once; so do an outbox and an inbox
// migrating into one new schema.
func TestMigrateConcurrent(t *testing.T) {
	t.Parallel()
	ctx := watchdog(t)
	p := pool(t)
	opts := pginbox.Options{Schema: freshSchema(t)}
	errs := make(chan error, 9)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() { errs <- pginbox.Migrate(ctx, p, opts) })
	}
	wg.Go(func() { errs <- pgoutbox.Migrate(ctx, p, pgoutbox.Options{Schema: opts.Schema, Partitions: 1}) })
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	require.Equal(t, []int{1}, versions(t, opts))
}

// TestMigrationSQL: the rendered SQL, run as it is (as psql would), makes
// an inbox Migrate finds up to date and the store works on; the
// migration files, run as goose or golang-migrate would (search_path set,
// names as they are), make the default tables, and the down file drops
// them.
func TestMigrationSQL(t *testing.T) {
	t.Parallel()
	ctx := watchdog(t)
	p := pool(t)
	opts := pginbox.Options{Schema: freshSchema(t), Table: "orders_inbox"}
	sql, err := pginbox.MigrationSQL(opts)
	require.NoError(t, err)
	require.Contains(t, sql, `CREATE TABLE "`+opts.Schema+`"."orders_inbox_keyseq"`)
	require.Contains(t, sql, `CREATE INDEX "orders_inbox_applied_at_idx" ON "`+opts.Schema+`"."orders_inbox"`)
	require.NotContains(t, sql, "Names are unqualified", "the files' note on unqualified names is left out")
	runInTx(t, p, sql)
	require.Equal(t, []int{1}, versions(t, opts), "the SQL records its versions")
	require.NoError(t, pginbox.Migrate(ctx, p, opts), "Migrate finds the rendered SQL's inbox up to date")
	require.Equal(t, []int{1}, versions(t, opts))
	s, err := pginbox.NewSQL(sqlDB(t), opts)
	require.NoError(t, err)
	require.Equal(t, []bool{true, false}, record(t, s, "x", "x"))

	_, err = pginbox.MigrationSQL(pginbox.Options{Table: strings.Repeat("x", 42)})
	require.ErrorContains(t, err, "use 1 to 41 bytes")

	files := freshSchema(t)
	_, err = p.Exec(ctx, "CREATE SCHEMA "+pgx.Identifier{files}.Sanitize())
	require.NoError(t, err)
	up, err := fs.ReadFile(pginbox.Migrations, "001_create_inbox.up.sql")
	require.NoError(t, err)
	down, err := fs.ReadFile(pginbox.Migrations, "001_create_inbox.down.sql")
	require.NoError(t, err)
	runInTx(t, p, "SET LOCAL search_path TO "+pgx.Identifier{files}.Sanitize()+";\n"+string(up))
	require.Equal(t, []string{"inbox", "inbox_keyseq", "inbox_offsets"}, tables(t, files))
	fileStore, err := pginbox.New(p, pginbox.Options{Schema: files})
	require.NoError(t, err)
	require.Equal(t, []bool{true}, record(t, fileStore, "y"))
	runInTx(t, p, "SET LOCAL search_path TO "+pgx.Identifier{files}.Sanitize()+";\n"+string(down))
	require.Empty(t, tables(t, files))
}

func runInTx(t *testing.T, p *pgxpool.Pool, sql string) {
	t.Helper()
	ctx := watchdog(t)
	tx, err := p.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(context.Background()) }()
	_, err = tx.Exec(ctx, sql)
	require.NoError(t, err)
	require.NoError(t, tx.Commit(ctx))
}

// TestAutovacuumSettings: the tables carry the storage parameters the
// migration sets for an insert-then-delete table (see the migration).
func TestAutovacuumSettings(t *testing.T) {
	t.Parallel()
	opts := migrated(t)
	for table, want := range map[string]string{
		"inbox":         "autovacuum_vacuum_scale_factor=0.01",
		"inbox_keyseq":  "fillfactor=70",
		"inbox_offsets": "fillfactor=50",
	} {
		var got []string
		require.NoError(t, pool(t).QueryRow(watchdog(t), "SELECT reloptions FROM pg_class WHERE oid = $1::regclass",
			pgx.Identifier{opts.Schema, table}.Sanitize()).Scan(&got))
		require.Contains(t, got, want, table)
	}
}

// TestPurgePlan: on a table of 20,000 records, analyzed, Purge's
// statement reads the oldest through the applied_at index (and the keys
// through theirs) instead of scanning and sorting the table.
func TestPurgePlan(t *testing.T) {
	t.Parallel()
	ctx := watchdog(t)
	p := pool(t)
	opts := migrated(t)
	inboxT := pgx.Identifier{opts.Schema, "inbox"}.Sanitize()
	keyseq := pgx.Identifier{opts.Schema, "inbox_keyseq"}.Sanitize()
	_, err := p.Exec(ctx, "INSERT INTO "+inboxT+" (id, applied_at) SELECT 'id-' || i, now() - i * interval '1 second' FROM generate_series(1, 20000) i")
	require.NoError(t, err)
	_, err = p.Exec(ctx, "INSERT INTO "+keyseq+" (key, seq, updated_at) SELECT 'k-' || i, i, now() - i * interval '1 second' FROM generate_series(1, 20000) i")
	require.NoError(t, err)
	_, err = p.Exec(ctx, "ANALYZE "+inboxT+", "+keyseq)
	require.NoError(t, err)
	// The plan of the statement as the store runs it, with a horizon
	// that takes every row and a batch of 1,000.
	rows, err := p.Query(ctx, "EXPLAIN "+pginbox.PurgeSQL(opts), "now", 1000)
	require.NoError(t, err)
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	plan := strings.Join(lines, "\n")
	require.Contains(t, plan, "Index Scan using inbox_applied_at_idx", plan)
	require.Contains(t, plan, "Index Scan using inbox_keyseq_updated_at_idx", plan)
	require.NotContains(t, plan, "Seq Scan", plan)
	require.NotContains(t, plan, "Sort", plan)
}
