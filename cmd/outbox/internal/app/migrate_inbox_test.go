package app

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxrelay/outbox/backends/mysql/mysqlinbox"
	"github.com/outboxrelay/outbox/backends/postgres/pginbox"
	"github.com/outboxrelay/outbox/cmd/outbox/internal/admincmd"
)

func inboxStatusOf(t *testing.T, flags []string) admincmd.InboxStatusJSON {
	t.Helper()
	var s admincmd.InboxStatusJSON
	out := cliOK(t, append([]string{"migrate", "status", "--inbox", "-o", "json"}, flags...)...)
	if err := json.Unmarshal([]byte(out), &s); err != nil {
		t.Fatalf("migrate status --inbox -o json: %v\n%s", err, out)
	}
	return s
}

// pgTables lists the tables of schema.
func pgTables(t *testing.T, pool *pgxpool.Pool, schema string) []string {
	t.Helper()
	rows, err := pool.Query(context.Background(), "SELECT tablename FROM pg_tables WHERE schemaname = $1 ORDER BY tablename", schema)
	if err != nil {
		t.Fatal(err)
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return names
}

// TestMigrateInboxPostgres: status, up, up again, down (confirmed) on a
// Postgres inbox, next to an outbox in the same schema that it leaves
// alone; the store works on what migrate up created.
func TestMigrateInboxPostgres(t *testing.T) {
	t.Parallel()
	url, pool := cliPostgres(t)
	schema := cliSchema(t, pool)
	flags := []string{"--store", url, "--schema", schema, "--inbox", "--inbox-table", "orders_inbox"}
	run := func(args ...string) []string { return append(args, flags...) }
	name := fmt.Sprintf(`"%s"."orders_inbox"`, schema)

	if got := cliOK(t, run("migrate", "status")...); !strings.Contains(got, "no inbox at "+name) ||
		!strings.Contains(got, "outbox migrate up --inbox --store URL --schema "+schema+" --inbox-table orders_inbox") || !strings.Contains(got, "create_inbox  no") {
		t.Fatalf("migrate status --inbox before creation:\n%s", got)
	}
	if s := inboxStatusOf(t, flags[:len(flags)-3]); s.Exists || s.Version != 0 || s.Latest != pginbox.LatestVersion() || s.Kind != "postgres" || len(s.Migrations) != 1 {
		t.Fatalf("migrate status --inbox -o json before creation: %+v", s)
	}
	cliOK(t, "migrate", "up", "--store", url, "--schema", schema, "--partitions", "2") // the outbox, next to it
	cliFails(t, 2, []string{"--partitions is the outbox's partition count; an inbox has none"}, run("migrate", "up", "--partitions", "2")...)
	if got := cliOK(t, run("migrate", "up")...); !strings.Contains(got, "created the inbox "+name+" in postgres://") || !strings.Contains(got, "at version 1") {
		t.Fatalf("migrate up --inbox: %q", got)
	}
	if got := cliOK(t, run("migrate", "up")...); got != fmt.Sprintf("the inbox %s is at version 1 already: nothing to do\n", name) {
		t.Fatalf("migrate up --inbox again: %q", got)
	}
	s := inboxStatusOf(t, flags)
	if !s.Exists || s.Version != 1 || s.Inbox != name || !s.Migrations[0].Applied || s.Migrations[0].AppliedAt == nil {
		t.Fatalf("migrate status --inbox -o json: %+v", s)
	}
	if got := cliOK(t, run("migrate", "status")...); !strings.Contains(got, "inbox "+name+" in postgres://") || !strings.Contains(got, "version 1 of 1") {
		t.Fatalf("migrate status --inbox:\n%s", got)
	}
	store, err := pginbox.New(pool, pginbox.Options{Schema: schema, Table: "orders_inbox"})
	if err != nil {
		t.Fatal(err)
	}
	var fresh []bool
	if err := store.InTx(context.Background(), func(ctx context.Context, tx pgx.Tx) error {
		fresh, err = store.Record(ctx, tx, []string{"a", "a"})
		return err
	}); err != nil || len(fresh) != 2 || !fresh[0] || fresh[1] {
		t.Fatalf("Record on the migrated inbox: %v, %v", fresh, err)
	}

	cliFails(t, 2, []string{"refusing to roll the inbox " + name, "pass --yes"}, run("migrate", "down")...)
	cliFails(t, 2, []string{"--to 1: migrate down --inbox rolls the inbox back to version 0 only"}, run("migrate", "down", "--to", "1", "--yes")...)
	got := cliOK(t, run("migrate", "down", "--yes")...)
	if !strings.Contains(got, "rolled the inbox "+name+" back from version 1 to 0") || !strings.Contains(got, "left the schema") {
		t.Fatalf("migrate down --inbox: %q", got)
	}
	for _, table := range pgTables(t, pool, schema) {
		if !strings.HasPrefix(table, "outbox") {
			t.Fatalf("migrate down --inbox left %s", table)
		}
	}
	if len(pgTables(t, pool, schema)) == 0 {
		t.Fatal("migrate down --inbox dropped the outbox")
	}
	cliFails(t, 1, []string{"no inbox at " + name, "nothing to roll back"}, run("migrate", "down", "--yes")...)
	if st := migrateStatusOf(t, []string{"--store", url, "--schema", schema}); !st.Exists {
		t.Fatalf("the outbox is gone: %+v", st)
	}

	// A schema of the inbox's own goes with it.
	own := cliSchema(t, pool)
	cliOK(t, "migrate", "up", "--inbox", "--store", url, "--schema", own)
	if got := cliOK(t, "migrate", "down", "--inbox", "--yes", "--store", url, "--schema", own); !strings.Contains(got, fmt.Sprintf(`dropped the schema "%s"`, own)) {
		t.Fatalf("migrate down --inbox of a schema of its own: %q", got)
	}
}

// TestMigrateInboxSQL: migrate sql --inbox prints SQL that creates the
// inbox (Postgres, without connecting; MySQL for a mysql:// store), which
// migrate status --inbox then finds applied.
func TestMigrateInboxSQL(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url, pool := cliPostgres(t)
	schema := cliSchema(t, pool)
	sql := cliOK(t, "migrate", "sql", "--inbox", "--schema", schema, "--inbox-table", "billing_inbox")
	if !strings.Contains(sql, fmt.Sprintf(`CREATE TABLE "%s"."billing_inbox_offsets"`, schema)) || strings.Contains(sql, "partitions") {
		t.Fatalf("migrate sql --inbox:\n%.600s", sql)
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, sql); err != nil {
		t.Fatalf("running the printed SQL: %v", err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if s := inboxStatusOf(t, []string{"--store", url, "--schema", schema, "--inbox-table", "billing_inbox"}); !s.Exists || s.Version != 1 {
		t.Fatalf("the inbox the SQL created: %+v", s)
	}
	if got := cliOK(t, "migrate", "sql", "--inbox", "--store", "mysql://u@127.0.0.1:1/app"); !strings.Contains(got, "CREATE TABLE") || !strings.Contains(got, "`inbox_keyseq`") {
		t.Fatalf("migrate sql --inbox for MySQL:\n%.600s", got)
	}
	cliFails(t, 2, []string{"--partitions N is required"}, "migrate", "sql")
	cliFails(t, 2, []string{"--partitions is the outbox's partition count; an inbox has none"}, "migrate", "sql", "--inbox", "--partitions", "2")
	cliFails(t, 2, []string{"--inbox-table names an inbox's table: add --inbox"}, "migrate", "sql", "--partitions", "2", "--inbox-table", "x")
	cliFails(t, 2, []string{"--inbox-table", "pginbox: Options.Table"}, "migrate", "sql", "--inbox", "--inbox-table", strings.Repeat("x", 42))
}

// TestMigrateInboxRedis: every migrate command with --inbox on a Redis
// store says that a Redis inbox needs no schema, without connecting.
func TestMigrateInboxRedis(t *testing.T) {
	t.Parallel()
	store := "redis://127.0.0.1:1" // nothing listens: the answer must not need the server
	for _, cmd := range [][]string{{"up"}, {"down", "--yes"}, {"status"}, {"sql"}} {
		args := append([]string{"migrate"}, cmd...)
		cliFails(t, 2, []string{"migrate " + cmd[0] + " --inbox does not apply to Redis", "a Redis inbox has no schema"}, append(args, "--inbox", "--store", store)...)
	}
}

// TestMigrateInboxMySQL: up, status, down on a MySQL inbox next to an
// outbox, through mysqlinbox.
func TestMigrateInboxMySQL(t *testing.T) {
	t.Parallel()
	url, db := cliMySQL(t)
	flags := []string{"--store", url, "--inbox"}
	run := func(args ...string) []string { return append(args, flags...) }
	if got := cliOK(t, run("migrate", "status")...); !strings.Contains(got, "no inbox at `inbox`") {
		t.Fatalf("migrate status --inbox before creation:\n%s", got)
	}
	cliOK(t, "migrate", "up", "--store", url, "--partitions", "1")
	if got := cliOK(t, run("migrate", "up")...); !strings.Contains(got, "created the inbox `inbox` in mysql://") || strings.Contains(got, mysqlTestPassword) {
		t.Fatalf("migrate up --inbox: %q", got)
	}
	if got := cliOK(t, run("migrate", "up")...); !strings.Contains(got, "is at version 1 already: nothing to do") {
		t.Fatalf("migrate up --inbox again: %q", got)
	}
	s := inboxStatusOf(t, flags[:2])
	if !s.Exists || s.Kind != "mysql" || s.Version != mysqlinbox.LatestVersion() || s.Migrations[0].AppliedAt == nil {
		t.Fatalf("migrate status --inbox -o json: %+v", s)
	}
	versions, err := mysqlinbox.MigrationStatus(context.Background(), db, mysqlinbox.Options{})
	if err != nil || len(versions) != 1 {
		t.Fatalf("mysqlinbox.MigrationStatus after migrate up --inbox: %v, %v", versions, err)
	}
	got := cliOK(t, run("migrate", "down", "--yes")...)
	if !strings.Contains(got, "rolled the inbox `inbox` back from version 1 to 0") || !strings.Contains(got, "`inbox_migrations` included") {
		t.Fatalf("migrate down --inbox: %q", got)
	}
	if n := countTables(t, db, "inbox%"); n != 0 {
		t.Fatalf("%d inbox tables left", n)
	}
	if n := countTables(t, db, "outbox%"); n == 0 {
		t.Fatal("migrate down --inbox dropped the outbox")
	}
	cliFails(t, 2, []string{"--schema names a Postgres schema, but the store is MySQL"}, run("migrate", "up", "--schema", "x")...)
}

func countTables(t *testing.T, db *sql.DB, like string) int {
	t.Helper()
	var n int
	if err := db.QueryRow("SELECT count(*) FROM information_schema.tables WHERE table_schema = DATABASE() AND table_name LIKE ?", like).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestMigrateHelpListsInbox: each migrate command's help shows --inbox.
func TestMigrateHelpListsInbox(t *testing.T) {
	t.Parallel()
	for _, cmd := range []string{"up", "down", "status", "sql"} {
		if got := cliOK(t, "migrate", cmd, "--help"); !strings.Contains(got, "--inbox ") || !strings.Contains(got, "--inbox-table=NAME") {
			t.Fatalf("outbox migrate %s --help lacks --inbox:\n%s", cmd, got)
		}
	}
	if got := cliOK(t, "migrate", "--help"); !strings.Contains(got, "With --inbox") {
		t.Fatalf("outbox migrate --help:\n%s", got)
	}
}
