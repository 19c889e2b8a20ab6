package mysqlinbox_test

import (
	"context"
	"database/sql"
	"errors"
	"io/fs"
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
	if got := routines(t, db); !slices.Equal(got, []string{"orders_inbox_finish", "orders_inbox_record_keys"}) {
		t.Fatalf("procedures after Migrate: %v", got)
	}
	var applied int
	if err := db.QueryRowContext(ctx, "SELECT count(*) FROM `orders_inbox_migrations`").Scan(&applied); err != nil || applied != mysqlinbox.LatestVersion() {
		t.Fatalf("versions recorded once each: %d, %v; want %d", applied, err, mysqlinbox.LatestVersion())
	}
	if err := mysqlinbox.Migrate(ctx, db, opts); err != nil {
		t.Fatalf("Migrate again: %v", err)
	}
	got, err := mysqlinbox.MigrationStatus(ctx, db, opts)
	if err != nil || !slices.Equal(got, []int{1, 2}) {
		t.Fatalf("MigrationStatus = %v, %v; want [1 2]", got, err)
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
	if got := routines(t, db); !slices.Equal(got, []string{"inbox_finish", "inbox_record_keys"}) {
		t.Fatalf("procedures after MigrateDown of orders_inbox: %v; want only the default inbox's", got)
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
	for _, want := range []string{"CREATE TABLE IF NOT EXISTS `t2` (", "`t2_keyseq`", "`t2_offsets`", "-- 001_create_inbox",
		"-- 002_procedures", "CREATE PROCEDURE `t2_record_keys`", "CREATE PROCEDURE `t2_finish`", "INSERT IGNORE INTO `t2` (id"} {
		if !strings.Contains(s, want) {
			t.Errorf("MigrationSQL lacks %q:\n%s", want, s)
		}
	}
	if strings.Contains(s, "EXISTS `inbox") || strings.Contains(s, "`inbox_") {
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

// TestMigrateOddTableNames: a table name with a quote, a backslash or
// non-ASCII letters works for the tables and the lock name.
func TestMigrateOddTableNames(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, _ := newDB(t)
	for _, table := range []string{`o'brien\x`, "收件箱", strings.Repeat("t", 48)} {
		opts := mysqlinbox.Options{Table: table}
		if err := mysqlinbox.Migrate(ctx, db, opts); err != nil {
			t.Fatalf("Migrate(%q): %v", table, err)
		}
		s, err := mysqlinbox.New(db, opts)
		if err != nil {
			t.Fatal(err)
		}
		err = s.InTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
			got, err := s.Record(ctx, tx, []string{"a"})
			if err == nil && !slices.Equal(got, []bool{true}) {
				t.Errorf("Record in %q = %v", table, got)
			}
			return err
		})
		if err != nil {
			t.Fatalf("Record in %q: %v", table, err)
		}
		var lockName string
		if err := db.QueryRowContext(ctx, "SELECT "+mysqlinbox.LockName(table)).Scan(&lockName); err != nil || len(lockName) > 64 {
			t.Fatalf("LockName(%q) = %q, %v; want at most 64 characters", table, lockName, err)
		}
		if err := mysqlinbox.MigrateDown(ctx, db, opts); err != nil {
			t.Fatalf("MigrateDown(%q): %v", table, err)
		}
	}
	if got := tables(t, db); len(got) != 0 {
		t.Fatalf("tables left: %v", got)
	}
}

// TestMigrationFilesAsTheyAre: with the default table, the SQL of
// MigrationSQL is the embedded files' own (what goose or golang-migrate
// run from Migrations).
func TestMigrationFilesAsTheyAre(t *testing.T) {
	t.Parallel()
	s, err := mysqlinbox.MigrationSQL(mysqlinbox.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"001_create_inbox", "002_procedures"} {
		up, err := fs.ReadFile(mysqlinbox.Migrations, name+".up.sql")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := fs.ReadFile(mysqlinbox.Migrations, name+".down.sql"); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(s, string(up)) {
			t.Fatalf("MigrationSQL with the default table is not the embedded file %s", name)
		}
	}
	if mysqlinbox.LatestVersion() != 2 {
		t.Fatalf("LatestVersion = %d, want 2", mysqlinbox.LatestVersion())
	}
}
