package app

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/outboxrelay/outbox/cmd/outbox/internal/admincmd"

	pgoutbox "github.com/outboxrelay/outbox/backends/postgres"
)

func migrateStatusOf(t *testing.T, flags []string) admincmd.MigrateStatusJSON {
	t.Helper()
	var s admincmd.MigrateStatusJSON
	out := cliOK(t, append([]string{"migrate", "status", "-o", "json"}, flags...)...)
	if err := json.Unmarshal([]byte(out), &s); err != nil {
		t.Fatalf("migrate status -o json: %v\n%s", err, out)
	}
	return s
}

func TestMigratePostgres(t *testing.T) {
	t.Parallel()
	url, pool := cliPostgres(t)
	schema := cliSchema(t, pool)
	flags := []string{"--store", url, "--schema", schema}
	run := func(args ...string) []string { return append(args, flags...) }
	latest := pgoutbox.LatestVersion()

	if got := cliOK(t, run("migrate", "status")...); !strings.Contains(got, "no outbox at") || !strings.Contains(got, "outbox migrate up --store URL --schema "+schema+" --partitions N") {
		t.Fatalf("migrate status before creation:\n%s", got)
	}
	if s := migrateStatusOf(t, flags); s.Exists || *s.Version != 0 || *s.Latest != latest || s.Partitions != nil || len(s.Migrations) != latest || s.Migrations[0].Applied {
		t.Fatalf("migrate status -o json before creation: %+v", s)
	}
	cliFails(t, 1, []string{"no outbox at", "create it with", "--partitions N"}, run("status")...)
	cliFails(t, 2, []string{"needs its partition count: pass --partitions N"}, run("migrate", "up")...)
	if got := cliOK(t, run("migrate", "up", "--partitions", "3")...); !strings.Contains(got, fmt.Sprintf("created \"%s\".\"outbox\"", schema)) || !strings.Contains(got, "3 partitions") {
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
		if !m.Applied || m.AppliedAt == nil {
			t.Fatalf("migration %d not applied: %+v", m.Version, s)
		}
	}
	if st := statusOf(t, flags); st.Partitions != 3 {
		t.Fatalf("status reads %d partitions, want the stored 3", st.Partitions)
	}

	cliFails(t, 2, []string{"refusing to roll", "pass --yes"}, run("migrate", "down")...)
	if got := cliOK(t, run("migrate", "down", "--yes")...); !strings.Contains(got, fmt.Sprintf("back from version %d to %d", latest, latest-1)) {
		t.Fatalf("migrate down: %q", got)
	}
	if got := cliOK(t, run("migrate", "status")...); !strings.Contains(got, fmt.Sprintf("version %d of %d", latest-1, latest)) || !strings.Contains(got, "run 'outbox migrate up'") {
		t.Fatalf("migrate status after down:\n%s", got)
	}
	// The count is stored by migration 4: above it, up needs no count.
	if got := cliOK(t, run("migrate", "up")...); !strings.Contains(got, fmt.Sprintf("from version %d to %d", latest-1, latest)) || !strings.Contains(got, "3 partitions") {
		t.Fatalf("migrate up after one step down: %q", got)
	}
	cliOK(t, run("migrate", "down", "--to", "3", "--yes")...)
	cliFails(t, 2, []string{"created before the partition count was stored", "--partitions N"}, run("migrate", "up")...)
	cliOK(t, run("migrate", "up", "--partitions", "3")...)
	cliFails(t, 2, []string{"never goes down"}, run("migrate", "up", "--to", "1")...)
	cliOK(t, run("migrate", "down", "--to", "0", "--yes")...)
	if s := migrateStatusOf(t, flags); s.Exists || *s.Version != 0 {
		t.Fatalf("after down --to 0: %+v", s)
	}
	cliFails(t, 1, []string{"nothing to roll back"}, run("migrate", "down", "--yes")...)
}

// TestMigrateSQL: migrate sql prints SQL that creates the outbox when run
// as it is (as psql would), without connecting.
func TestMigrateSQL(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url, pool := cliPostgres(t)
	schema := cliSchema(t, pool)
	sql := cliOK(t, "migrate", "sql", "--schema", schema, "--table", "events", "--partitions", "5")
	if !strings.Contains(sql, fmt.Sprintf(`CREATE SCHEMA IF NOT EXISTS "%s"`, schema)) || !strings.Contains(sql, `"events_meta"`) {
		t.Fatalf("migrate sql:\n%.600s", sql)
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
	if st := statusOf(t, []string{"--store", url, "--schema", schema, "--table", "events"}); st.Partitions != 5 {
		t.Fatalf("the outbox the SQL created has %d partitions, want 5", st.Partitions)
	}
	cliFails(t, 2, []string{"--partitions"}, "migrate", "sql")
	cliFails(t, 2, []string{"migrate sql does not apply to Redis"}, "migrate", "sql", "--partitions", "2", "--store", "redis://127.0.0.1:1")
	cliFails(t, 2, []string{"--prefix names a Redis outbox"}, "migrate", "sql", "--partitions", "2", "--prefix", "{x}")
}

func TestMigrateRedis(t *testing.T) {
	t.Parallel()
	url, client := cliRedis(t)
	prefix := cliPrefix(t, client)
	flags := []string{"--store", url, "--prefix", prefix}
	run := func(args ...string) []string { return append(args, flags...) }

	if got := cliOK(t, run("migrate", "status")...); !strings.Contains(got, "no outbox at prefix") {
		t.Fatalf("migrate status before creation:\n%s", got)
	}
	if s := migrateStatusOf(t, flags); s.Exists || s.Partitions != nil || s.Version != nil || s.Migrations != nil {
		t.Fatalf("migrate status -o json before creation: %+v", s)
	}
	cliFails(t, 1, []string{fmt.Sprintf("no outbox at prefix %q", prefix), "create it with", "--partitions N"}, run("parked")...)
	cliFails(t, 2, []string{"needs its partition count"}, run("migrate", "up")...)
	if got := cliOK(t, run("migrate", "up", "--partitions", "3")...); !strings.Contains(got, "created the outbox at prefix") || !strings.Contains(got, "with 3 partitions") {
		t.Fatalf("migrate up: %q", got)
	}
	if got := cliOK(t, run("migrate", "up")...); !strings.Contains(got, "exists with 3 partitions: nothing to do") {
		t.Fatalf("migrate up again: %q", got)
	}
	cliFails(t, 1, []string{"was created with 3 partitions, but 2 were configured"}, run("migrate", "up", "--partitions", "2")...)
	if s := migrateStatusOf(t, flags); !s.Exists || s.Partitions == nil || *s.Partitions != 3 {
		t.Fatalf("migrate status -o json: %+v", s)
	}
	if st := statusOf(t, flags); st.Partitions != 3 || len(st.ByPartition) != 3 {
		t.Fatalf("status: %+v", st)
	}
	cliFails(t, 2, []string{"migrate down does not apply to Redis", prefix + ":meta"}, run("migrate", "down")...)
	cliFails(t, 2, []string{"migrate sql does not apply to Redis"}, run("migrate", "sql", "--partitions", "3")...)
	cliFails(t, 2, []string{"--to applies to Postgres"}, run("migrate", "up", "--to", "2")...)
	cliFails(t, 2, []string{"--schema and --table name a Postgres outbox"}, "status", "--store", url, "--schema", "x")
	cliFails(t, 2, []string{"must hold exactly one non-empty {hash tag}"}, "status", "--store", url, "--prefix", "nobraces")
}
