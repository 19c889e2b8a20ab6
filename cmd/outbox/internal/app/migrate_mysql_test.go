package app

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"testing"

	mysqloutbox "github.com/outboxrelay/outbox/backends/mysql"
	"github.com/outboxrelay/outbox/internal/testenv"
)

// TestMigrateMySQL: migrate up, status, down on a MySQL outbox, with the
// partition count stored at creation and checked afterwards.
func TestMigrateMySQL(t *testing.T) {
	t.Parallel()
	url, db := cliMySQL(t)
	flags := []string{"--store", url, "--table", "orders_outbox"}
	latest := mysqloutbox.LatestVersion()
	mysqlMigrateUp(t, db, flags, latest)
	mysqlMigrateDown(t, db, flags, latest)
	cliFails(t, 2, []string{"--schema names a Postgres schema, but the store is MySQL"}, "migrate", "up", "--partitions", "1", "--store", url, "--schema", "x")
	cliFails(t, 2, []string{"--prefix names a Redis outbox, but the store is MySQL"}, "migrate", "status", "--store", url, "--prefix", "{x}")
}

// mysqlMigrateUp: status before creation, up without and with a count,
// up again, up with another count, status after.
func mysqlMigrateUp(t *testing.T, db *sql.DB, flags []string, latest int) {
	t.Helper()
	run := func(args ...string) []string { return append(args, flags...) }
	if got := cliOK(t, run("migrate", "status")...); !strings.Contains(got, "no outbox at `orders_outbox`") || !strings.Contains(got, "outbox migrate up --store URL --table orders_outbox --partitions N") {
		t.Fatalf("migrate status before creation:\n%s", got)
	}
	if s := migrateStatusOf(t, flags); s.Exists || s.Kind != "mysql" || *s.Version != 0 || *s.Latest != latest || s.Partitions != nil || len(s.Migrations) != latest || s.Migrations[0].Applied {
		t.Fatalf("migrate status -o json before creation: %+v", s)
	}
	cliFails(t, 1, []string{"no outbox at `orders_outbox`", "create it with", "--partitions N"}, run("status")...)
	cliFails(t, 2, []string{"needs its partition count: pass --partitions N"}, run("migrate", "up")...)
	if got := cliOK(t, run("migrate", "up", "--partitions", "3")...); !strings.Contains(got, "created `orders_outbox` in mysql://") || !strings.Contains(got, fmt.Sprintf("at version %d, 3 partitions", latest)) {
		t.Fatalf("migrate up: %q", got)
	}
	if got := cliOK(t, run("migrate", "up")...); !strings.Contains(got, "nothing to do") {
		t.Fatalf("migrate up again: %q", got)
	}
	cliOK(t, run("migrate", "up", "--partitions", "3")...)
	cliFails(t, 1, []string{"was created with 3 partitions, but 4 were configured", "leave --partitions off"}, run("migrate", "up", "--partitions", "4")...)
	s := migrateStatusOf(t, flags)
	if !s.Exists || *s.Version != latest || s.Partitions == nil || *s.Partitions != 3 {
		t.Fatalf("migrate status -o json: %+v", s)
	}
	for _, m := range s.Migrations {
		if !m.Applied || m.AppliedAt == nil || m.AppliedAt.IsZero() {
			t.Fatalf("migration %d not applied: %+v", m.Version, s)
		}
	}
	if got := cliOK(t, run("migrate", "status")...); !strings.Contains(got, fmt.Sprintf("version %d of %d, 3 partitions", latest, latest)) || !strings.Contains(got, "create_outbox") {
		t.Fatalf("migrate status:\n%s", got)
	}
	var tables int
	if err := db.QueryRow("SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = DATABASE() AND table_name LIKE 'orders\\_outbox%'").Scan(&tables); err != nil || tables < 5 {
		t.Fatalf("%d tables of the outbox after migrate up (%v)", tables, err)
	}
}

// mysqlMigrateDown: down asks first, then drops the tables.
func mysqlMigrateDown(t *testing.T, db *sql.DB, flags []string, latest int) {
	t.Helper()
	run := func(args ...string) []string { return append(args, flags...) }
	var tables int

	cliFails(t, 2, []string{"refusing to roll", "pass --yes"}, run("migrate", "down")...)
	if got := cliOK(t, run("migrate", "down", "--yes")...); !strings.Contains(got, fmt.Sprintf("back from version %d to %d", latest, latest-1)) {
		t.Fatalf("migrate down: %q", got)
	}
	if err := db.QueryRow("SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = DATABASE()").Scan(&tables); err != nil || (latest == 1 && tables != 0) {
		t.Fatalf("%d tables left after migrate down to 0 (%v)", tables, err)
	}
	if s := migrateStatusOf(t, flags); s.Exists != (latest > 1) || *s.Version != latest-1 {
		t.Fatalf("after down: %+v", s)
	}
	if latest == 1 {
		cliFails(t, 1, []string{"nothing to roll back"}, run("migrate", "down", "--yes")...)
	}
}

// TestMigrateSQLMySQL: migrate sql with a mysql:// store prints SQL that
// creates the outbox when run as it is (as the mysql client would),
// without connecting.
func TestMigrateSQLMySQL(t *testing.T) {
	t.Parallel()
	url, _ := cliMySQL(t)
	out := cliOK(t, "migrate", "sql", "--store", "mysql://nobody:Never-Used-5@127.0.0.1:1/"+dbOf(t, url), "--table", "events", "--partitions", "5")
	if !strings.Contains(out, "CREATE TABLE IF NOT EXISTS `events_meta`") {
		t.Fatalf("migrate sql:\n%.600s", out)
	}
	multi, err := sql.Open("mysql", testenv.MySQLDSN(dbOf(t, url))+"?multiStatements=true")
	if err != nil {
		t.Fatal(err)
	}
	defer multi.Close()
	if _, err := multi.ExecContext(context.Background(), out); err != nil {
		t.Fatalf("running the printed SQL: %v", err)
	}
	if s := migrateStatusOf(t, []string{"--store", url, "--table", "events"}); s.Partitions == nil || *s.Partitions != 5 {
		t.Fatalf("the outbox the SQL created: %+v, want 5 partitions", s)
	}
	cliFails(t, 2, []string{"--schema names a Postgres schema"}, "migrate", "sql", "--partitions", "2", "--store", url, "--schema", "x")
}

// dbOf is the database of a mysql:// URL.
func dbOf(t testing.TB, url string) string {
	t.Helper()
	i := strings.LastIndexByte(url, '/')
	if i < 0 {
		t.Fatalf("no database in %q", url)
	}
	return strings.SplitN(url[i+1:], "?", 2)[0]
}
