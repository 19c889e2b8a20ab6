package app

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/outboxrelay/outbox/cmd/outbox/internal/admincmd"

	"github.com/outboxrelay/outbox/cmd/outbox/internal/clitest"

	"github.com/jackc/pgx/v5"

	"github.com/outboxrelay/outbox"
	pgoutbox "github.com/outboxrelay/outbox/backends/postgres"
	redisoutbox "github.com/outboxrelay/outbox/backends/redis"
)

func statusOf(t *testing.T, flags []string) admincmd.StatusJSON {
	t.Helper()
	var s admincmd.StatusJSON
	out := cliOK(t, append([]string{"status", "-o", "json"}, flags...)...)
	if err := json.Unmarshal([]byte(out), &s); err != nil {
		t.Fatalf("status -o json: %v\n%s", err, out)
	}
	return s
}

// exerciseAdmin runs every admin command against a seeded outbox named by
// flags.
func exerciseAdmin(t *testing.T, store outbox.Store, flags ...string) {
	with := func(cmd string, rest ...string) []string {
		return append(append(strings.Fields(cmd), flags...), rest...)
	}
	ctx := context.Background()
	_, perPartition := store.(outbox.PartitionInspector)
	_, canLook := store.(outbox.Looker)

	// status: per partition and in total, with the lease holder.
	lease, err := store.AcquireLease(ctx, 1, "holder-x", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	s := statusOf(t, flags)
	if s.Partitions != 2 || s.Total.Pending != 3 || s.Total.Due != 2 || s.Total.Parked != 3 || s.Total.OldestDue == nil {
		t.Fatalf("status totals: %+v", s)
	}
	if perPartition {
		if len(s.ByPartition) != 2 {
			t.Fatalf("status by partition: %+v", s.ByPartition)
		}
		var sum int64
		for _, p := range s.ByPartition {
			sum += p.Pending + p.Parked
		}
		if sum != 6 || s.ByPartition[1].Lease == nil || s.ByPartition[1].Lease.Owner != "holder-x" || s.ByPartition[0].Lease != nil {
			t.Fatalf("status by partition: %+v", s.ByPartition)
		}
		text := cliOK(t, with("status")...)
		if !strings.Contains(text, "holder-x (version") || !strings.Contains(text, "\nall ") || !strings.Contains(text, "2 partitions") {
			t.Fatalf("status:\n%s", text)
		}
	} else {
		t.Logf("%T does not implement outbox.PartitionInspector: per-partition status not checked", store)
	}
	if err := store.ReleaseLease(ctx, lease); err != nil {
		t.Fatal(err)
	}

	// parked: pages, filters, error cutting.
	got := cliOK(t, with("parked", "--limit", "2")...)
	if !strings.Contains(got, "e1") || !strings.Contains(got, "e2") || strings.Contains(got, "e3 ") ||
		!strings.Contains(got, "broker said no: e1") || !strings.Contains(got, "(more: --after e2)") {
		t.Fatalf("parked page 1:\n%s", got)
	}
	if !strings.Contains(got, clitest.KafkaHint) || !strings.Contains(got, " … ") || strings.Contains(got, "MIDDLE-MARKER") {
		t.Fatalf("parked must cut a long error in its middle and keep the fix hint at its end:\n%s", got)
	}
	if got := cliOK(t, with("parked", "--after", "e2")...); !strings.Contains(got, "e3") || strings.Contains(got, "e1 ") || strings.Contains(got, "(more") {
		t.Fatalf("parked page 2:\n%s", got)
	}
	if got := cliOK(t, with("parked", "--full-error", "--topic", "payments")...); !strings.Contains(got, "MIDDLE-MARKER") || !strings.Contains(got, clitest.KafkaHint) {
		t.Fatalf("parked --full-error:\n%s", got)
	}
	filters := []struct {
		args []string
		want []string
	}{
		{[]string{"--topic", "payments"}, []string{"e2"}},
		{[]string{"--key", "k3"}, []string{"e3"}},
		{[]string{"--error", "NO: E1"}, []string{"e1"}},
		{[]string{"--since", "1h"}, []string{"e1", "e2", "e3"}},
		{[]string{"--until", "2000-01-01"}, nil},
		{[]string{"--topic", "orders", "--error", "timeout"}, []string{"e3"}},
		{[]string{"--topic", "orders", "--limit", "1"}, []string{"e1"}},
	}
	for _, f := range filters {
		var p admincmd.ParkedJSON
		out := cliOK(t, with("parked", append(f.args, "-o", "json")...)...)
		if err := json.Unmarshal([]byte(out), &p); err != nil {
			t.Fatalf("parked %v -o json: %v\n%s", f.args, err, out)
		}
		var ids []string
		for _, e := range p.Entries {
			ids = append(ids, e.ID)
		}
		if fmt.Sprint(ids) != fmt.Sprint(f.want) {
			t.Errorf("parked %v: got %v, want %v", f.args, ids, f.want)
		}
	}
	if got := cliOK(t, with("parked", "--until", "2000-01-01")...); !strings.Contains(got, "no parked entries match created before 2000-01-01") {
		t.Fatalf("parked with no match:\n%s", got)
	}
	var page admincmd.ParkedJSON
	if err := json.Unmarshal([]byte(cliOK(t, with("parked", "-o", "json", "--limit", "1")...)), &page); err != nil {
		t.Fatal(err)
	}
	if len(page.Entries) != 1 || page.NextAfter == nil || *page.NextAfter != "e1" || page.Entries[0].LastError != "broker said\nno: e1" || page.Entries[0].Attempts != 1 {
		t.Fatalf("parked -o json --limit 1: %+v", page)
	}

	// show: payload as JSON, text or hex; headers; the full error.
	if canLook {
		got = cliOK(t, with("show", "e0")...)
		for _, w := range []string{"state       pending", "source: checkout", "payload     30 bytes, JSON", "  \"order\": 42,", "last error  (none)"} {
			if !strings.Contains(got, w) {
				t.Fatalf("show e0 lacks %q:\n%s", w, got)
			}
		}
		got = cliOK(t, with("show", "e1")...)
		if !strings.Contains(got, "state       parked") || !strings.Contains(got, "  broker said\n  no: e1\n") || !strings.Contains(got, "5 bytes, text\nhello\n") {
			t.Fatalf("show e1:\n%s", got)
		}
		if got = cliOK(t, with("show", "e4")...); !strings.Contains(got, "binary, hex") || !strings.Contains(got, "00 01 02 ff 78") {
			t.Fatalf("show e4:\n%s", got)
		}
		if got = cliOK(t, with("show", "e2")...); !strings.Contains(got, clitest.LongError) {
			t.Fatalf("show e2 must print the whole error:\n%s", got)
		}
		var j admincmd.ShowJSON
		if err := json.Unmarshal([]byte(cliOK(t, with("show", "e0", "-o", "json")...)), &j); err != nil {
			t.Fatal(err)
		}
		var compact bytes.Buffer
		_ = json.Compact(&compact, j.PayloadJSON)
		if j.State != "pending" || j.DueAt == nil || j.PayloadText == nil || compact.String() != `{"order":42,"items":["a","b"]}` || j.Headers["source"] != "checkout" {
			t.Fatalf("show -o json: %+v", j)
		}
		cliFails(t, 1, []string{`no pending or parked entry has ID "nope"`}, with("show", "nope")...)
	} else {
		t.Logf("%T does not implement outbox.Looker: show not checked", store)
	}

	// requeue: by ID with a result per ID; by filter, dry run first;
	// --all needs a confirmation.
	got = cliOK(t, with("requeue", "e1", "nope", "e0", "e1")...) // e1 twice: once
	if canLook {
		want := "nope: not found (already sent, cancelled, or never appended)\ne0: not parked (it is pending; requeue moves parked entries only)\ne1: requeued\nrequeued 1 entries\n"
		if got != want {
			t.Fatalf("requeue e1 nope e0 e1:\n%s\nwant:\n%s", got, want)
		}
	} else if !strings.HasSuffix(got, "requeued 1 entries\n") {
		t.Fatalf("requeue e1 nope e0:\n%s", got)
	}
	if got := cliOK(t, with("requeue", "--topic", "payments", "--dry-run")...); got != "e2: would requeue\nwould requeue 1 entries (dry run: nothing changed)\n" {
		t.Fatalf("requeue --dry-run: %q", got)
	}
	if s := statusOf(t, flags); s.Total.Parked != 2 {
		t.Fatalf("after the dry run parked = %d, want 2", s.Total.Parked)
	}
	cliFails(t, 2, []string{"refusing to requeue all 2 parked entries", "pass --yes"}, with("requeue", "--all")...)
	r := cliWith(t, cliIO{stdinTTY: true, stdin: "no\n"}, with("requeue", "--all")...)
	if r.code != 1 || !strings.Contains(r.stderr, "Type yes to go on") || !strings.Contains(r.stderr, "not confirmed") {
		t.Fatalf("requeue --all, declined: %v", r)
	}
	if s := statusOf(t, flags); s.Total.Parked != 2 {
		t.Fatalf("after a declined requeue parked = %d, want 2", s.Total.Parked)
	}
	r = cliWith(t, cliIO{stdinTTY: true, stdin: "yes\n"}, with("requeue", "--all", "--limit", "1")...) // --limit: the old name of --batch
	if r.code != 0 || r.stdout != "e2: requeued\ne3: requeued\nrequeued 2 entries\n" {
		t.Fatalf("requeue --all, confirmed: %v", r)
	}

	// cancel: by ID; by filter over the parked entries, with --yes.
	if got := cliOK(t, with("cancel", "e0", "nope")...); got != "e0: cancelled\nnope: not found (already sent, cancelled, or never appended)\ncancelled 1 entries, 1 not found\n" {
		t.Fatalf("cancel: %q", got)
	}
	lease, err = store.AcquireLease(ctx, store.Partitions()-1, "parker", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	for p := range store.Partitions() { // park e2 and e3 again
		l := lease
		if p != lease.Partition {
			if l, err = store.AcquireLease(ctx, p, "parker", time.Minute); err != nil {
				t.Fatal(err)
			}
		}
		batch, err := store.FindPendingBatch(ctx, l, 10)
		if err != nil {
			t.Fatal(err)
		}
		var fails []outbox.Failure
		var rest []string
		for _, e := range batch {
			if e.ID == "e2" || e.ID == "e3" {
				fails = append(fails, outbox.Failure{ID: e.ID, Error: "again", Park: true})
			} else {
				rest = append(rest, e.ID)
			}
		}
		if err := store.MarkFailed(ctx, l, fails); err != nil {
			t.Fatal(err)
		}
		if err := store.Release(ctx, l, rest); err != nil {
			t.Fatal(err)
		}
		if err := store.ReleaseLease(ctx, l); err != nil {
			t.Fatal(err)
		}
	}
	cliFails(t, 2, []string{"refusing to cancel (delete) the 1 parked entries", `topic "payments"`, "--yes"}, with("cancel", "--topic", "payments")...)
	if got := cliOK(t, with("cancel", "--all", "--dry-run")...); got != "e2: would cancel\ne3: would cancel\nwould cancel 2 entries (dry run: nothing changed)\n" {
		t.Fatalf("cancel --all --dry-run: %q", got)
	}
	if got := cliOK(t, with("cancel", "--topic", "payments", "--yes")...); got != "e2: cancelled\ncancelled 1 entries\n" {
		t.Fatalf("cancel --topic payments --yes: %q", got)
	}
	if got := cliOK(t, with("cancel", "--topic", "payments", "--yes")...); !strings.Contains(got, "no parked entries match topic \"payments\"") {
		t.Fatalf("cancel with nothing left: %q", got)
	}
	s = statusOf(t, flags)
	if s.Total.Pending != 3 || s.Total.Parked != 1 { // e1, e4, e5 pending; e3 parked
		t.Fatalf("status at the end: %+v", s.Total)
	}
}

func TestAdminOnPostgres(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url, pool := cliPostgres(t)
	schema := cliSchema(t, pool)
	opts := pgoutbox.Options{Schema: schema, Partitions: 2}
	if err := pgoutbox.Migrate(ctx, pool, opts); err != nil {
		t.Fatal(err)
	}
	b, err := pgoutbox.New(ctx, pool, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	clitest.SeedAdmin(t, b, func(e ...outbox.Entry) error {
		return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { return b.AppendInTx(ctx, tx, e...) })
	})
	exerciseAdmin(t, b, "--store", url, "--schema", schema)
}

func TestAdminOnRedis(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url, client := cliRedis(t)
	prefix := cliPrefix(t, client)
	b, err := redisoutbox.New(ctx, client, redisoutbox.Options{Prefix: prefix, Partitions: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	clitest.SeedAdmin(t, b, func(e ...outbox.Entry) error { return b.Append(ctx, e...) })
	exerciseAdmin(t, b, "--store", url, "--prefix", prefix)
}

// TestPurgeArchive: purge deletes archived entries sent before --before,
// asks first, and refuses Redis.
func TestPurgeArchive(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url, pool := cliPostgres(t)
	schema := cliSchema(t, pool)
	opts := pgoutbox.Options{Schema: schema, Partitions: 1, Archive: true}
	if err := pgoutbox.Migrate(ctx, pool, opts); err != nil {
		t.Fatal(err)
	}
	b, err := pgoutbox.New(ctx, pool, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		return b.AppendInTx(ctx, tx, outbox.Entry{ID: "a1", Topic: "t"}, outbox.Entry{ID: "a2", Topic: "t"})
	}); err != nil {
		t.Fatal(err)
	}
	lease, err := b.AcquireLease(ctx, 0, "o", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.MarkSent(ctx, lease, []string{"a1", "a2"}); err != nil {
		t.Fatal(err)
	}
	flags := []string{"--store", url, "--schema", schema}
	cliFails(t, 2, []string{"refusing to delete the entries of", "outbox_archive", "--yes"}, append([]string{"purge", "--before", "1h"}, flags...)...)
	if got := cliOK(t, append([]string{"purge", "--before", "1h", "--yes"}, flags...)...); !strings.HasPrefix(got, "purged 0 archived entries sent before") {
		t.Fatalf("purge of an hour ago: %q", got)
	}
	future := time.Now().Add(time.Hour).UTC().Format(time.RFC3339)
	if got := cliOK(t, append([]string{"purge", "--before", future, "--yes", "--batch", "1"}, flags...)...); !strings.HasPrefix(got, "purged 2 archived entries") {
		t.Fatalf("purge: %q", got)
	}
	var n int
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM "+pgx.Identifier{schema, "outbox_archive"}.Sanitize()).Scan(&n); err != nil || n != 0 {
		t.Fatalf("archive rows after purge: %d, %v", n, err)
	}
	cliFails(t, 2, []string{"a Redis outbox has no archive"}, "purge", "--before", "1h", "--store", "redis://127.0.0.1:1")
}
