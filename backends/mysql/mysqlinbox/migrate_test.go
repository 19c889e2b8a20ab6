package mysqlinbox_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/outboxrelay/outbox/backends/mysql/mysqlinbox"
	"github.com/outboxrelay/outbox/inbox"
)

func TestMigrateConcurrentIdempotentAndDown(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, _ := newDB(t)
	opts := mysqlinbox.Options{Table: "orders_inbox"}
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for i := range errs {
		wg.Go(func() { errs[i] = mysqlinbox.Migrate(ctx, db, opts) })
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatalf("concurrent Migrate: %v", err)
		}
	}
	want := []string{"orders_inbox", "orders_inbox_keyseq", "orders_inbox_migrations", "orders_inbox_offsets"}
	if got := tables(t, db); !slices.Equal(got, want) {
		t.Fatalf("tables after Migrate: %v, want %v", got, want)
	}
	var applied int
	if err := db.QueryRowContext(ctx, "SELECT count(*) FROM `orders_inbox_migrations`").Scan(&applied); err != nil || applied != mysqlinbox.LatestVersion() {
		t.Fatalf("versions recorded once each: %d, %v; want %d", applied, err, mysqlinbox.LatestVersion())
	}
	if err := mysqlinbox.Migrate(ctx, db, opts); err != nil {
		t.Fatalf("Migrate again: %v", err)
	}
	got, err := mysqlinbox.MigrationStatus(ctx, db, opts)
	if err != nil || !slices.Equal(got, []int{1}) {
		t.Fatalf("MigrationStatus = %v, %v; want [1]", got, err)
	}
	// Another table name in the same database is another inbox.
	if err := mysqlinbox.Migrate(ctx, db, mysqlinbox.Options{}); err != nil {
		t.Fatal(err)
	}

	if err := mysqlinbox.MigrateDown(ctx, db, opts); err != nil {
		t.Fatal(err)
	}
	if got := tables(t, db); !slices.Equal(got, []string{"inbox", "inbox_keyseq", "inbox_migrations", "inbox_offsets"}) {
		t.Fatalf("tables after MigrateDown of orders_inbox: %v; want only the default inbox's", got)
	}
	if got, err := mysqlinbox.MigrationStatus(ctx, db, opts); err != nil || len(got) != 0 {
		t.Fatalf("MigrationStatus of a removed inbox = %v, %v; want none", got, err)
	}
	if err := mysqlinbox.MigrateDown(ctx, db, opts); err != nil {
		t.Fatalf("MigrateDown of a removed inbox: %v", err)
	}
	if err := mysqlinbox.Migrate(ctx, db, opts); err != nil {
		t.Fatalf("Migrate after MigrateDown: %v", err)
	}
}

// A migration that stopped half-way (MySQL commits each DDL statement on
// its own) is completed by the next run: every statement can run again.
func TestMigrateCompletesAHalfDoneRun(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, _ := newDB(t)
	sqlText, err := mysqlinbox.MigrationSQL(mysqlinbox.Options{})
	if err != nil {
		t.Fatal(err)
	}
	first := sqlText[strings.Index(sqlText, "CREATE TABLE"):]
	first = first[:strings.Index(first, ";")]
	if _, err := db.ExecContext(ctx, first); err != nil {
		t.Fatal(err)
	}
	if err := mysqlinbox.Migrate(ctx, db, mysqlinbox.Options{}); err != nil {
		t.Fatalf("Migrate over a half-done run: %v", err)
	}
	if got := tables(t, db); len(got) != 4 {
		t.Fatalf("tables: %v", got)
	}
}

func TestMigrationSQLRendersTheTable(t *testing.T) {
	t.Parallel()
	s, err := mysqlinbox.MigrationSQL(mysqlinbox.Options{Table: "t2"})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"CREATE TABLE IF NOT EXISTS `t2` (", "`t2_keyseq`", "`t2_offsets`", "-- 001_create_inbox"} {
		if !strings.Contains(s, want) {
			t.Errorf("MigrationSQL lacks %q:\n%s", want, s)
		}
	}
	if strings.Contains(s, "EXISTS `inbox") {
		t.Errorf("MigrationSQL kept a default name:\n%s", s)
	}
	d, err := mysqlinbox.MigrationSQL(mysqlinbox.Options{})
	if err != nil || !strings.Contains(d, "CREATE TABLE IF NOT EXISTS `inbox` (") {
		t.Fatalf("MigrationSQL with the default table: %v\n%s", err, d)
	}
}

func TestOptionsRejectBadTables(t *testing.T) {
	t.Parallel()
	for _, table := range []string{"a`b", "trailing ", strings.Repeat("x", 49), "nul\x00", "\xff"} {
		if _, err := mysqlinbox.MigrationSQL(mysqlinbox.Options{Table: table}); !errors.Is(err, inbox.ErrInvalidArgument) {
			t.Errorf("MigrationSQL(Table %q) = %v, want ErrInvalidArgument", table, err)
		}
		if err := mysqlinbox.Migrate(context.Background(), nil, mysqlinbox.Options{Table: table}); !errors.Is(err, inbox.ErrInvalidArgument) {
			t.Errorf("Migrate(Table %q) = %v, want ErrInvalidArgument", table, err)
		}
	}
	if err := mysqlinbox.Migrate(context.Background(), nil, mysqlinbox.Options{}); !errors.Is(err, inbox.ErrInvalidArgument) || !strings.Contains(err.Error(), "db is nil") {
		t.Errorf("Migrate(nil db) = %v", err)
	}
}
