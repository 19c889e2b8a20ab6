package app

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
)

// TestMigrateArchivePartitioned: migrate up --archive-partitioned makes
// the archive of a new outbox partitioned by day, converts the plain
// archive of an existing one (keeping its rows), and refuses what it
// cannot do (an inbox, --to below the archive's migration, Redis).
func TestMigrateArchivePartitioned(t *testing.T) {
	t.Parallel()
	url, pool := cliPostgres(t)
	ctx := context.Background()
	partitioned := func(schema string) bool {
		t.Helper()
		var ok bool
		if err := pool.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_partitioned_table WHERE partrelid = to_regclass($1))",
			pgx.Identifier{schema, "outbox_archive"}.Sanitize()).Scan(&ok); err != nil {
			t.Fatal(err)
		}
		return ok
	}

	// A new outbox.
	fresh := cliSchema(t, pool)
	got := cliOK(t, "migrate", "up", "--store", url, "--schema", fresh, "--partitions", "1", "--archive-partitioned")
	if !strings.Contains(got, "is partitioned by UTC day") || !partitioned(fresh) {
		t.Fatalf("migrate up --archive-partitioned of a new outbox: %q, partitioned %v", got, partitioned(fresh))
	}
	// Again: nothing to convert.
	cliOK(t, "migrate", "up", "--store", url, "--schema", fresh, "--archive-partitioned")

	// An existing outbox whose plain archive has rows.
	old := cliSchema(t, pool)
	cliOK(t, "migrate", "up", "--store", url, "--schema", old, "--partitions", "1")
	archive := pgx.Identifier{old, "outbox_archive"}.Sanitize()
	if _, err := pool.Exec(ctx, "INSERT INTO "+archive+` (seq, id, partition, topic, key, created_at, attempts, last_error, sent_at)
SELECT g, 'id' || g, 0, 't', ''::bytea, now(), 1, '', now() - g * interval '1 day' FROM generate_series(1, 5) AS g`); err != nil {
		t.Fatal(err)
	}
	if partitioned(old) {
		t.Fatal("the archive is partitioned before --archive-partitioned")
	}
	cliOK(t, "migrate", "up", "--store", url, "--schema", old, "--archive-partitioned")
	var n int
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM "+archive).Scan(&n); err != nil || n != 5 || !partitioned(old) {
		t.Fatalf("after the conversion: %d rows (%v), partitioned %v; want 5, true", n, err, partitioned(old))
	}

	cliFails(t, 2, []string{"--archive-partitioned needs the archive"}, "migrate", "up", "--store", url, "--schema", cliSchema(t, pool), "--partitions", "1", "--to", "1", "--archive-partitioned")
	cliFails(t, 2, []string{"--archive-partitioned applies to an outbox's archive"}, "migrate", "up", "--store", url, "--schema", fresh, "--inbox", "--archive-partitioned")
}
