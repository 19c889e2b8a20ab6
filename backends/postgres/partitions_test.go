package pgoutbox_test

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxrelay/outbox"
	pgoutbox "github.com/outboxrelay/outbox/backends/postgres"
)

// wantMismatch checks that err is a PartitionMismatchError with the given
// fields, also matching ErrInvalidArgument.
func wantMismatch(t *testing.T, what string, err error, outboxName string, configured, stored int) {
	t.Helper()
	var pm *outbox.PartitionMismatchError
	if !errors.As(err, &pm) {
		t.Fatalf("%s: %v, want a *outbox.PartitionMismatchError", what, err)
	}
	if pm.Outbox != outboxName || pm.Configured != configured || pm.Stored != stored {
		t.Fatalf("%s: %+v, want Outbox %s, Configured %d, Stored %d", what, *pm, outboxName, configured, stored)
	}
	if !errors.Is(err, outbox.ErrInvalidArgument) {
		t.Fatalf("%s: %v does not match ErrInvalidArgument", what, err)
	}
}

// leaseRows returns the lease rows of an outbox table as "p:owner:version".
func leaseRows(t *testing.T, p *pgxpool.Pool, schema, table string) []string {
	t.Helper()
	rows, err := p.Query(t.Context(), "SELECT partition || ':' || owner || ':' || version FROM "+pgx.Identifier{schema, table + "_lease"}.Sanitize()+" ORDER BY partition")
	if err != nil {
		t.Fatal(err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestMigrateStoresPartitionCount(t *testing.T) {
	t.Parallel()
	p := pool(t, extended)
	ctx := t.Context()
	schema := freshSchema(t, p)
	name := pgx.Identifier{schema, "outbox"}.Sanitize()

	err := pgoutbox.Migrate(ctx, p, pgoutbox.Options{Schema: schema})
	if err == nil || !strings.Contains(err.Error(), "Options.Partitions") {
		t.Fatalf("Migrate of a new outbox without Partitions: %v; want an error naming Options.Partitions", err)
	}
	if tableExists(t, p, schema, "outbox") {
		t.Fatal("the failed Migrate left the outbox table behind")
	}

	opts := pgoutbox.Options{Schema: schema, Partitions: 4}
	if err := pgoutbox.Migrate(ctx, p, opts); err != nil {
		t.Fatal(err)
	}
	var stored int
	var created time.Time
	if err := p.QueryRow(ctx, "SELECT partitions, created_at FROM "+pgx.Identifier{schema, "outbox_meta"}.Sanitize()).Scan(&stored, &created); err != nil || stored != 4 || created.IsZero() {
		t.Fatalf("stored count %d, created %v (%v); want 4", stored, created, err)
	}
	want := []string{"0::0", "1::0", "2::0", "3::0"}
	if got := leaseRows(t, p, schema, "outbox"); !slices.Equal(got, want) {
		t.Fatalf("lease rows %v, want the free rows %v", got, want)
	}
	var expired int
	if err := p.QueryRow(ctx, "SELECT count(*) FROM "+pgx.Identifier{schema, "outbox_lease"}.Sanitize()+" WHERE expires_at < now()").Scan(&expired); err != nil || expired != 4 {
		t.Fatalf("%d lease rows expired (%v), want 4", expired, err)
	}

	for _, n := range []int{4, 0} {
		if err := pgoutbox.Migrate(ctx, p, pgoutbox.Options{Schema: schema, Partitions: n}); err != nil {
			t.Fatalf("Migrate again with Partitions %d: %v, want a no-op", n, err)
		}
	}
	wantMismatch(t, "Migrate with 5", pgoutbox.Migrate(ctx, p, pgoutbox.Options{Schema: schema, Partitions: 5}), name, 5, 4)

	for _, n := range []int{0, 4} {
		b, err := pgoutbox.New(ctx, p, pgoutbox.Options{Schema: schema, Partitions: n})
		if err != nil {
			t.Fatalf("New with Partitions %d: %v", n, err)
		}
		if b.Partitions() != 4 || b.Options().Partitions != 4 {
			t.Fatalf("New with Partitions %d: Partitions() %d, Options().Partitions %d; want 4", n, b.Partitions(), b.Options().Partitions)
		}
		b.Close()
	}
	_, err = pgoutbox.New(ctx, p, pgoutbox.Options{Schema: schema, Partitions: 5})
	wantMismatch(t, "New with 5", err, name, 5, 4)
	if _, err := pgoutbox.New(ctx, p, pgoutbox.Options{Schema: schema, Partitions: -1}); err == nil {
		t.Fatal("New with Partitions -1 succeeded")
	}
}

func TestNewWithoutOutboxSaysHowToCreateIt(t *testing.T) {
	t.Parallel()
	p := pool(t, extended)
	ctx := t.Context()
	existing := freshSchema(t, p)
	if _, err := p.Exec(ctx, "CREATE SCHEMA "+pgx.Identifier{existing}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	for _, opts := range []pgoutbox.Options{
		{Schema: "pgoutbox_test_no_such_schema"},
		{Schema: existing, Table: "events", Partitions: 3},
	} {
		_, err := pgoutbox.New(ctx, p, opts)
		if err == nil {
			t.Fatalf("New on %s.%s succeeded", opts.Schema, opts.Table)
		}
		table := opts.Table
		if table == "" {
			table = "outbox"
		}
		for _, want := range []string{"does not exist", opts.Schema, `"` + table + `"`, "pgoutbox.Migrate", "outbox migrate up --partitions"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("New on a missing outbox: %q does not mention %q", err, want)
			}
		}
	}
}

// TestMigrateOutboxFromBefore004 brings an outbox made by migrations 1-3
// up to date: New refuses it until Migrate stores the count, Migrate needs
// the count, and lease rows from before keep their versions.
func TestMigrateOutboxFromBefore004(t *testing.T) {
	t.Parallel()
	p := pool(t, extended)
	ctx := t.Context()
	opts := pgoutbox.Options{Schema: freshSchema(t, p)}
	if err := pgoutbox.MigrateTo(ctx, p, opts, 3); err != nil {
		t.Fatalf("MigrateTo 3 without Partitions: %v", err)
	}
	lease := pgx.Identifier{opts.Schema, "outbox_lease"}.Sanitize()
	if _, err := p.Exec(ctx, "INSERT INTO "+lease+" VALUES (1, 'old', 7, now() - interval '1 second')"); err != nil {
		t.Fatal(err)
	}
	_, err := pgoutbox.New(ctx, p, pgoutbox.Options{Schema: opts.Schema, Partitions: 3})
	if err == nil || !strings.Contains(err.Error(), "before migration 004") || !strings.Contains(err.Error(), "pgoutbox.Migrate") {
		t.Fatalf("New on an outbox from before 004: %v; want an error that says to run pgoutbox.Migrate", err)
	}
	if err := pgoutbox.Migrate(ctx, p, opts); err == nil || !strings.Contains(err.Error(), "Options.Partitions") {
		t.Fatalf("Migrate to 004 without Partitions: %v; want an error naming Options.Partitions", err)
	}
	opts.Partitions = 3
	if err := pgoutbox.Migrate(ctx, p, opts); err != nil {
		t.Fatal(err)
	}
	if got, want := leaseRows(t, p, opts.Schema, "outbox"), []string{"0::0", "1:old:7", "2::0"}; !slices.Equal(got, want) {
		t.Fatalf("lease rows %v, want %v", got, want)
	}
	b, err := pgoutbox.New(ctx, p, pgoutbox.Options{Schema: opts.Schema})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if b.Partitions() != 3 {
		t.Fatalf("Partitions() = %d, want 3", b.Partitions())
	}
	for part, want := range map[int]int64{0: 1, 1: 8} {
		l, err := b.AcquireLease(ctx, part, "new", time.Minute)
		if err != nil || l.Version != want {
			t.Fatalf("AcquireLease of partition %d: %+v, %v; want version %d", part, l, err, want)
		}
	}
}

// TestMigrationSQL runs MigrationSQL's output as a DBA would (in one
// transaction, no search_path), then checks that the outbox works and
// that Migrate finds everything applied.
func TestMigrationSQL(t *testing.T) {
	t.Parallel()
	if _, err := pgoutbox.MigrationSQL(pgoutbox.Options{}); err == nil || !strings.Contains(err.Error(), "Options.Partitions") {
		t.Fatalf("MigrationSQL without Partitions: %v; want an error naming Options.Partitions", err)
	}
	p := pool(t, extended)
	ctx := t.Context()
	opts := pgoutbox.Options{Schema: freshSchema(t, p), Table: "Odd Name", Partitions: 5}
	sql, err := pgoutbox.MigrationSQL(opts)
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(sql) {
		if strings.HasPrefix(strings.TrimSpace(line), "--") {
			continue // the header of 004 documents the placeholder
		}
		if strings.Contains(line, "{partitions}") || strings.Contains(line, `"outbox`) {
			t.Fatalf("MigrationSQL left a placeholder or a default name in %q", line)
		}
	}
	if err := pgx.BeginFunc(ctx, p, func(tx pgx.Tx) error { _, err := tx.Exec(ctx, sql); return err }); err != nil {
		t.Fatalf("running MigrationSQL's output: %v\n%s", err, sql)
	}
	b, err := pgoutbox.New(ctx, p, pgoutbox.Options{Schema: opts.Schema, Table: opts.Table})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if b.Partitions() != 5 {
		t.Fatalf("Partitions() = %d, want 5", b.Partitions())
	}
	appendN(t, b, p, "s", 3, func(int) string { return "" })
	if err := pgoutbox.Migrate(ctx, p, opts); err != nil {
		t.Fatalf("Migrate after MigrationSQL: %v, want a no-op", err)
	}
	var n int
	if err := p.QueryRow(ctx, "SELECT count(*) FROM "+pgx.Identifier{opts.Schema, opts.Table + "_migrations"}.Sanitize()).Scan(&n); err != nil || n != migrationCount(t) {
		t.Fatalf("%d versions recorded (%v), want %d", n, err, migrationCount(t))
	}
	opts.Partitions = 6
	wantMismatch(t, "Migrate with 6 after MigrationSQL with 5", pgoutbox.Migrate(ctx, p, opts), pgx.Identifier{opts.Schema, opts.Table}.Sanitize(), 6, 5)
}
