package app

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxrelay/outbox"
	pgoutbox "github.com/outboxrelay/outbox/backends/postgres"
	"github.com/outboxrelay/outbox/cmd/outbox/internal/admincmd"
)

// papercutOutbox migrates a one-partition Postgres outbox in a schema of
// the test's own and returns its backend and the CLI flags that name it.
func papercutOutbox(t *testing.T) (*pgoutbox.Backend, *pgxpool.Pool, []string) {
	t.Helper()
	ctx := context.Background()
	url, pool := cliPostgres(t)
	schema := cliSchema(t, pool)
	opts := pgoutbox.Options{Schema: schema, Partitions: 1}
	if err := pgoutbox.Migrate(ctx, pool, opts); err != nil {
		t.Fatal(err)
	}
	b, err := pgoutbox.New(ctx, pool, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b, pool, []string{"--store", url, "--schema", schema}
}

// appendPg appends entries in one transaction.
func appendPg(t *testing.T, b *pgoutbox.Backend, pool *pgxpool.Pool, entries ...outbox.Entry) {
	t.Helper()
	ctx := context.Background()
	if err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { return b.AppendInTx(ctx, tx, entries...) }); err != nil {
		t.Fatal(err)
	}
}

// parkAll parks every due entry of partition 0.
func parkAll(t *testing.T, b *pgoutbox.Backend) {
	t.Helper()
	ctx := context.Background()
	l, err := b.AcquireLease(ctx, 0, "parker", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	batch, err := b.FindPendingBatch(ctx, l, 1000)
	if err != nil {
		t.Fatal(err)
	}
	fails := make([]outbox.Failure, len(batch))
	for i, e := range batch {
		fails[i] = outbox.Failure{ID: e.ID, Error: "no", Park: true}
	}
	if err := b.MarkFailed(ctx, l, fails); err != nil {
		t.Fatal(err)
	}
	if err := b.ReleaseLease(ctx, l); err != nil {
		t.Fatal(err)
	}
}

// TestRequeueByFilterAsksAndSummarises: requeue by filter asks first (or
// needs --yes), and past 20 entries prints a summary, not a line per
// entry, unless -v.
func TestRequeueByFilterAsksAndSummarises(t *testing.T) {
	t.Parallel()
	b, pool, flags := papercutOutbox(t)
	const n = 25
	entries := make([]outbox.Entry, n)
	for i := range entries {
		entries[i] = outbox.Entry{ID: fmt.Sprintf("r%02d", i), Topic: "orders", Key: fmt.Sprint(i)}
	}
	appendPg(t, b, pool, entries...)
	parkAll(t, b)
	args := func(rest ...string) []string {
		return append(append([]string{"requeue", "--topic", "orders"}, flags...), rest...)
	}

	cliFails(t, 2, []string{"refusing to requeue the 25 parked entries", `topic "orders"`, "pass --yes"}, args()...)
	if s := statusOf(t, flags); s.Total.Parked != n {
		t.Fatalf("after the refused requeue parked = %d, want %d", s.Total.Parked, n)
	}
	r := cliWith(t, cliIO{stdinTTY: true, stdin: "no\n"}, args()...)
	if r.code != 1 || !strings.Contains(r.stderr, "Type yes to go on") {
		t.Fatalf("requeue by filter, declined: %v", r)
	}
	got := cliOK(t, args("--yes")...)
	if want := "requeued 25 entries\n(25 per-entry lines left out: more than 20 entries; pass -v to print each one)\n"; got != want {
		t.Fatalf("requeue --yes of 25:\n%s\nwant:\n%s", got, want)
	}

	parkAll(t, b)
	got = cliOK(t, args("--yes", "-v")...)
	if lines := strings.Count(got, ": requeued\n"); lines != n || !strings.HasSuffix(got, "requeued 25 entries\n") {
		t.Fatalf("requeue --yes -v of 25: %d per-entry lines, want %d:\n%s", lines, n, got)
	}
}

// TestShowMaxBytes: show cuts a long payload at --max-bytes (64 KiB by
// default) and says so, in text and in JSON; --max-bytes 0 shows it all.
func TestShowMaxBytes(t *testing.T) {
	t.Parallel()
	b, pool, flags := papercutOutbox(t)
	payload := strings.Repeat("0123456789abcdef", 100<<10/16) // 100 KiB of text
	appendPg(t, b, pool, outbox.Entry{ID: "big", Topic: "t", Payload: []byte(payload)})
	show := func(rest ...string) []string { return append(append([]string{"show", "big"}, flags...), rest...) }

	got := cliOK(t, show()...)
	if !strings.Contains(got, "payload     102400 bytes, text\n") || !strings.Contains(got, "(payload cut: showed the first 65536 of 102400 bytes, 36864 left out; --max-bytes 0 shows it all)\n") {
		t.Fatalf("show of a 100 KiB payload says no cut:\n%.300s", got[max(0, len(got)-300):])
	}
	if strings.Contains(got, payload[:65537]) {
		t.Fatal("show printed more than 64 KiB of the payload")
	}
	got = cliOK(t, show("--max-bytes", "0")...)
	if !strings.Contains(got, payload) || strings.Contains(got, "payload cut") {
		t.Fatal("show --max-bytes 0 did not print the whole payload")
	}

	var j admincmd.ShowJSON
	out := cliOK(t, show("--max-bytes", "10", "-o", "json")...)
	if err := json.Unmarshal([]byte(out), &j); err != nil {
		t.Fatalf("show -o json: %v\n%s", err, out)
	}
	raw, err := base64.StdEncoding.DecodeString(j.PayloadBase64)
	if err != nil || !j.PayloadCut || j.PayloadBytes != 102400 || string(raw) != payload[:10] || j.PayloadText == nil || *j.PayloadText != payload[:10] {
		t.Fatalf("show --max-bytes 10 -o json: cut %v, payload_bytes %d, %d bytes shown (%v)", j.PayloadCut, j.PayloadBytes, len(raw), err)
	}
	cliFails(t, 2, []string{"--max-bytes must be 0"}, show("--max-bytes=-1")...)
}

// TestPurgeSaysTheOutboxDoesNotArchive: purge of an empty archive says the
// outbox does not archive, and what turns archiving on.
func TestPurgeSaysTheOutboxDoesNotArchive(t *testing.T) {
	t.Parallel()
	_, _, flags := papercutOutbox(t)
	got := cliOK(t, append([]string{"purge", "--before", "1h", "--yes"}, flags...)...)
	for _, want := range []string{"purged 0 archived entries", "is empty: this outbox does not archive", "'outbox relay --archive'", "pgoutbox.Options{Archive: true}", "--archive-retention 7d"} {
		if !strings.Contains(got, want) {
			t.Fatalf("purge of an outbox that does not archive: %q lacks %q", got, want)
		}
	}
}

// TestMigrateDownToZeroRemovesEverything: down --to 0 drops the migrations
// table and the schema migrate up created; a schema it did not create is
// left, and the output says so and why. migrate sql's comments match its
// schema-qualified statements.
func TestMigrateDownToZeroRemovesEverything(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url, pool := cliPostgres(t)
	schemaGone := func(schema string) bool {
		t.Helper()
		var gone bool
		if err := pool.QueryRow(ctx, "SELECT to_regnamespace($1) IS NULL", pgx.Identifier{schema}.Sanitize()).Scan(&gone); err != nil {
			t.Fatal(err)
		}
		return gone
	}

	created := cliSchema(t, pool)
	flags := []string{"--store", url, "--schema", created}
	cliOK(t, append([]string{"migrate", "up", "--partitions", "2"}, flags...)...)
	got := cliOK(t, append([]string{"migrate", "down", "--to", "0", "--yes"}, flags...)...)
	if !strings.Contains(got, "_migrations\" included") || !strings.Contains(got, "dropped the schema") || !schemaGone(created) {
		t.Fatalf("migrate down --to 0 of an outbox in a schema migrate up created:\n%s", got)
	}

	own := cliSchema(t, pool)
	if _, err := pool.Exec(ctx, "CREATE SCHEMA "+pgx.Identifier{own}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	flags = []string{"--store", url, "--schema", own}
	cliOK(t, append([]string{"migrate", "up", "--partitions", "2"}, flags...)...)
	got = cliOK(t, append([]string{"migrate", "down", "--to", "0", "--yes"}, flags...)...)
	if !strings.Contains(got, "left the schema") || !strings.Contains(got, "did not create it") || schemaGone(own) {
		t.Fatalf("migrate down --to 0 of an outbox in the caller's schema:\n%s", got)
	}
	var left bool
	if err := pool.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL", pgx.Identifier{own, "outbox_migrations"}.Sanitize()).Scan(&left); err != nil || left {
		t.Fatalf("migrations table left after down --to 0: %v %v", left, err)
	}

	sql := cliOK(t, "migrate", "sql", "--partitions", "2", "--schema", "billing")
	if strings.Contains(sql, "unqualified") || strings.Contains(sql, "{partitions}") || !strings.Contains(sql, "schema-qualified") {
		t.Fatalf("migrate sql's comments contradict its statements:\n%.800s", sql)
	}
}
