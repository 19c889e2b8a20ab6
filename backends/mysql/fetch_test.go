package mysqloutbox_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/outboxrelay/outbox"
	mysqloutbox "github.com/outboxrelay/outbox/backends/mysql"
)

// row is an entry inserted by plain SQL, so that the fetch and outcome
// tests depend on nothing but the schema.
type row struct {
	id, topic, key string
	partition      int
	headers        []byte
	due            time.Duration // next_at = server now + due
	attempts       int
}

// insertRows inserts rows in order (seq grows with the slice).
func insertRows(t testing.TB, db *sql.DB, rows ...row) {
	t.Helper()
	for _, r := range rows {
		topic := r.topic
		if topic == "" {
			topic = "t"
		}
		_, err := db.Exec("INSERT INTO `outbox` (id, `partition`, topic, `key`, payload, headers, created_at, next_at, attempts, last_error) "+
			"VALUES (?, ?, ?, ?, ?, ?, UTC_TIMESTAMP(6), TIMESTAMPADD(MICROSECOND, ?, UTC_TIMESTAMP(6)), ?, '')",
			r.id, r.partition, topic, []byte(r.key), []byte("p-"+r.id), r.headers, r.due.Microseconds(), r.attempts)
		if err != nil {
			t.Fatalf("inserting %s: %v", r.id, err)
		}
	}
}

// takeLease gives partition to owner for a minute by plain SQL, with a
// new version, and returns the lease.
func takeLease(t testing.TB, db *sql.DB, partition int, owner string) outbox.Lease {
	t.Helper()
	if _, err := db.Exec("UPDATE `outbox_lease` SET owner = ?, version = version + 1, expires_at = UTC_TIMESTAMP(6) + INTERVAL 1 MINUTE WHERE `partition` = ?", owner, partition); err != nil {
		t.Fatal(err)
	}
	l := outbox.Lease{Partition: partition, Owner: owner}
	if err := db.QueryRow("SELECT version FROM `outbox_lease` WHERE `partition` = ?", partition).Scan(&l.Version); err != nil {
		t.Fatal(err)
	}
	return l
}

func exec(t testing.TB, db *sql.DB, q string, args ...any) {
	t.Helper()
	if _, err := db.Exec(q, args...); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
}

func ids(es []outbox.Entry) []string {
	out := make([]string, len(es))
	for i, e := range es {
		out[i] = e.ID
	}
	return out
}

func wantIDs(t testing.TB, what string, got []outbox.Entry, want ...string) {
	t.Helper()
	if !slices.Equal(ids(got), want) && !(len(got) == 0 && len(want) == 0) {
		t.Fatalf("%s: got %q, want %q", what, ids(got), want)
	}
}

func TestFetchOrderAndHoldBack(t *testing.T) {
	t.Parallel()
	b, db := newBackend(t, mysqloutbox.Options{Partitions: 1})
	ctx := context.Background()
	insertRows(t, db,
		row{id: "a1", key: "a", due: -3 * time.Second, attempts: 1}, // attempted: holds a2, a3
		row{id: "b1", key: "b", due: -2 * time.Second},
		row{id: "a2", key: "a", due: -4 * time.Second},
		row{id: "n1", due: -1 * time.Second}, // no key: never held back
		row{id: "later", key: "c", due: time.Hour},
		row{id: "a3", key: "a", due: -5 * time.Second},
		row{id: "b2", key: "b", due: -2 * time.Second}, // same due time as b1: append order
		row{id: "ab", key: "ab", due: -6 * time.Second},
	)
	l := takeLease(t, db, 0, "me")
	got, err := b.FindPendingBatch(ctx, l, 10)
	if err != nil {
		t.Fatal(err)
	}
	wantIDs(t, "due order, key a held back by a1", got, "ab", "a1", "b1", "b2", "n1")
	if e := got[1]; e.Attempts != 1 || e.Key != "a" || e.Topic != "t" || string(e.Payload) != "p-a1" || e.CreatedAt.IsZero() || e.Partition != 0 {
		t.Fatalf("a1 read back as %+v", e)
	}
	got, err = b.FindPendingBatch(ctx, l, 2)
	if err != nil {
		t.Fatal(err)
	}
	wantIDs(t, "limit 2: a prefix of the order", got, "ab", "a1")

	// Parking a1 releases a2 and a3; the same key's entries come in due order.
	exec(t, db, "UPDATE `outbox` SET state = 'parked' WHERE id = 'a1'")
	got, err = b.FindPendingBatch(ctx, l, 10)
	if err != nil {
		t.Fatal(err)
	}
	wantIDs(t, "after a1 parked", got, "ab", "a3", "a2", "b1", "b2", "n1")
	// A deferred entry holds back its key as an attempted one does.
	exec(t, db, "UPDATE `outbox` SET deferred = 1, next_at = UTC_TIMESTAMP(6) + INTERVAL 1 HOUR WHERE id = 'b1'")
	got, err = b.FindPendingBatch(ctx, l, 10)
	if err != nil {
		t.Fatal(err)
	}
	wantIDs(t, "b1 deferred", got, "ab", "a3", "a2", "n1")
}

func TestFetchFencedByLease(t *testing.T) {
	t.Parallel()
	b, db := newBackend(t, mysqloutbox.Options{Partitions: 2})
	ctx := context.Background()
	insertRows(t, db, row{id: "x", partition: 1, due: -time.Second})
	l := takeLease(t, db, 1, "me")
	if got, err := b.FindPendingBatch(ctx, l, 5); err != nil || len(got) != 1 {
		t.Fatalf("live lease: %v, %v", got, err)
	}
	stale := l
	stale.Version--
	if _, err := b.FindPendingBatch(ctx, stale, 5); !errors.Is(err, outbox.ErrLeaseLost) {
		t.Fatalf("older version: %v, want ErrLeaseLost", err)
	}
	other := l
	other.Owner = "you"
	if _, err := b.FindPendingBatch(ctx, other, 5); !errors.Is(err, outbox.ErrLeaseLost) {
		t.Fatalf("other owner: %v, want ErrLeaseLost", err)
	}
	exec(t, db, "UPDATE `outbox_lease` SET expires_at = UTC_TIMESTAMP(6) - INTERVAL 1 SECOND WHERE `partition` = 1")
	if _, err := b.FindPendingBatch(ctx, l, 5); !errors.Is(err, outbox.ErrLeaseLost) {
		t.Fatalf("expired lease: %v, want ErrLeaseLost", err)
	}
	for _, err := range []error{
		b.MarkSent(ctx, l, []string{"x"}),
		b.MarkFailed(ctx, l, []outbox.Failure{{ID: "x", Error: "e"}}),
		b.Release(ctx, l, []string{"x"}),
	} {
		if !errors.Is(err, outbox.ErrLeaseLost) {
			t.Fatalf("write with an expired lease: %v, want ErrLeaseLost", err)
		}
	}
	var attempts int
	if err := db.QueryRow("SELECT attempts FROM `outbox` WHERE id = 'x'").Scan(&attempts); err != nil || attempts != 0 {
		t.Fatalf("the entry changed under an expired lease: attempts %d, %v", attempts, err)
	}
}

func TestFetchHoldAndPauses(t *testing.T) {
	t.Parallel()
	b, db := newBackend(t, mysqloutbox.Options{Partitions: 1})
	ctx := context.Background()
	insertRows(t, db,
		row{id: "k1", key: "k", topic: "paused", due: -time.Second},
		row{id: "k2", key: "k", topic: "open", due: -time.Second},
		row{id: "j1", key: "j", topic: "open", due: -time.Second},
		row{id: "j2", key: "j", topic: "paused", due: -time.Second},
		row{id: "j3", key: "j", topic: "open", due: -time.Second},
		row{id: "n1", topic: "paused", due: -time.Second},
		row{id: "n2", topic: "open", due: -time.Second},
	)
	l := takeLease(t, db, 0, "me")
	fetch := func(what string, want ...string) {
		t.Helper()
		got, err := b.FindPendingBatch(ctx, l, 10)
		if err != nil {
			t.Fatal(err)
		}
		wantIDs(t, what, got, want...)
	}
	fetch("nothing paused", "k1", "k2", "j1", "j2", "j3", "n1", "n2")
	exec(t, db, "INSERT INTO `outbox_pause_topic` (topic, since) VALUES ('paused', UTC_TIMESTAMP(6))")
	fetch("topic paused: its entries and what follows them in their key left out", "j1", "n2")
	exec(t, db, "UPDATE `outbox` SET attempts = 1 WHERE id = 'j2'")
	fetch("an attempted entry of a paused topic holds its key too", "j1", "n2")
	exec(t, db, "DELETE FROM `outbox_pause_topic`")
	fetch("resumed", "k1", "k2", "j1", "j2", "n1", "n2")
	exec(t, db, "INSERT INTO `outbox_pause_part` (`partition`, since) VALUES (0, UTC_TIMESTAMP(6))")
	fetch("partition paused")
	exec(t, db, "DELETE FROM `outbox_pause_part`")
	exec(t, db, "INSERT INTO `outbox_hold` (one, reason, since) VALUES (1, 'move', UTC_TIMESTAMP(6))")
	fetch("held")
	stale := l
	stale.Version++
	if _, err := b.FindPendingBatch(ctx, stale, 5); !errors.Is(err, outbox.ErrLeaseLost) {
		t.Fatalf("held outbox, wrong lease: %v, want ErrLeaseLost (the lease is still checked)", err)
	}
	exec(t, db, "DELETE FROM `outbox_hold`")
	fetch("unheld", "k1", "k2", "j1", "j2", "n1", "n2")
}

// TestFetchPlan checks on the server that the fetch walks outbox_due_idx
// in order and stops at the limit: no filesort, and the rows the index
// scan reads are about the limit, not the partition's backlog.
func TestFetchPlan(t *testing.T) {
	t.Parallel()
	b, db := newBackend(t, mysqloutbox.Options{Partitions: 2})
	exec(t, db, "SET SESSION max_recursive_iterations = 100000")
	exec(t, db, "INSERT INTO `outbox` (id, `partition`, topic, `key`, payload, created_at, next_at, attempts, last_error) "+
		"WITH RECURSIVE s(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM s WHERE n < 20000) "+
		"SELECT CONCAT('id', n), n % 2, 't', CONCAT('k', n % 500), 'x', UTC_TIMESTAMP(6), "+
		"UTC_TIMESTAMP(6) - INTERVAL 1 HOUR + INTERVAL n MICROSECOND, IF(n % 1000 = 0, 1, 0), '' FROM s")
	l := takeLease(t, db, 0, "me")
	inFlight := make([]string, 100)
	for i := range inFlight {
		inFlight[i] = fmt.Sprintf("id%d", 2*i+2)
	}
	// Before the table's statistics are collected (a new outbox, a burst
	// of appends) and after.
	for _, analyze := range []bool{false, true} {
		if analyze {
			exec(t, db, "ANALYZE TABLE `outbox`")
		}
		for _, next := range []bool{false, true} {
			args := []any{0, 100, l.Partition, l.Owner, l.Version}
			if next { // FetchNext: the 100 entries in flight are left out
				args = append([]any{0, `["` + strings.Join(inFlight, `","`) + `"]`}, args[1:]...)
			}
			checkPlan(t, db, mysqloutbox.FetchQuery(b, next), args...)
		}
	}
}

func checkPlan(t *testing.T, db *sql.DB, q string, args ...any) {
	t.Helper()
	var plan string
	if err := db.QueryRow("ANALYZE FORMAT=JSON "+q, args...).Scan(&plan); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(plan, "filesort") {
		t.Fatalf("the fetch sorts:\n%s", plan)
	}
	var doc any
	if err := json.Unmarshal([]byte(plan), &doc); err != nil {
		t.Fatal(err)
	}
	var found bool
	walkTables(doc, func(tbl map[string]any) {
		rows, _ := tbl["r_rows"].(float64)
		switch tbl["table_name"] {
		case "o":
			found = true
			if tbl["key"] != "outbox_due_idx" {
				t.Errorf("the fetch reads o through %v, want outbox_due_idx:\n%s", tbl["key"], plan)
			}
			if rows > 250 {
				t.Errorf("the fetch read %v rows of the index for a limit of 100:\n%s", rows, plan)
			}
		case "x":
			// FetchNext's IDs in flight: materialized once, then looked up.
			if loops, _ := tbl["r_loops"].(float64); loops > 1 {
				t.Errorf("FetchNext reads the IDs in flight %v times, want once (materialized):\n%s", loops, plan)
			}
		case "h":
			// The hold-back: about one row per entry (the holding one),
			// not the partition's rows of the key's neighbours.
			if tbl["key"] != "outbox_holdback_idx" || rows > 2 {
				t.Errorf("the hold-back reads %v rows per entry through %v, want outbox_holdback_idx:\n%s", rows, tbl["key"], plan)
			}
		}
	})
	if !found {
		t.Fatalf("no table o in the plan:\n%s", plan)
	}
}

// walkTables calls fn with every "table" object of an ANALYZE FORMAT=JSON
// document.
func walkTables(v any, fn func(map[string]any)) {
	switch x := v.(type) {
	case map[string]any:
		if _, ok := x["table_name"]; ok {
			fn(x)
		}
		for _, c := range x {
			walkTables(c, fn)
		}
	case []any:
		for _, c := range x {
			walkTables(c, fn)
		}
	}
}

func TestFetchNextLeavesOutTheBatchInFlight(t *testing.T) {
	t.Parallel()
	b, db := newBackend(t, mysqloutbox.Options{Partitions: 1})
	ctx := context.Background()
	insertRows(t, db,
		row{id: "a1", key: "a", due: -5 * time.Second},
		row{id: "b1", key: "b", due: -4 * time.Second, attempts: 2},
		row{id: "c1", key: "c", due: -3 * time.Second},
		row{id: "a2", key: "a", due: -2 * time.Second},
		row{id: "b2", key: "b", due: -2 * time.Second},
		row{id: "c2", key: "c", due: -1 * time.Second},
	)
	l := takeLease(t, db, 0, "me")
	first, err := b.FetchBatch(ctx, l, 2)
	if err != nil {
		t.Fatal(err)
	}
	wantIDs(t, "first batch", first.Entries, "a1", "b1")
	next, err := b.FetchNext(ctx, l, 10, first.Entries)
	if err != nil {
		t.Fatal(err)
	}
	// b1, attempted and in flight, still holds b2 back.
	wantIDs(t, "the batch behind the one in flight", next.Entries, "c1", "a2", "c2")
	stale := l
	stale.Version++
	if _, err := b.FetchNext(ctx, stale, 10, first.Entries); !errors.Is(err, outbox.ErrLeaseLost) {
		t.Fatalf("FetchNext with a stale lease: %v", err)
	}
}

// TestCustomTable: with Options.Table the statements name that table's
// indexes in their hints (Migrate names the indexes after the table).
func TestCustomTable(t *testing.T) {
	t.Parallel()
	b, db := newBackend(t, mysqloutbox.Options{Partitions: 1, Table: "my box"})
	ctx := context.Background()
	exec(t, db, "INSERT INTO `my box` (id, `partition`, topic, `key`, created_at, next_at, last_error) VALUES ('x', 0, 't', 'k', UTC_TIMESTAMP(6), UTC_TIMESTAMP(6), '')")
	exec(t, db, "UPDATE `my box_lease` SET owner = 'me', version = 1, expires_at = UTC_TIMESTAMP(6) + INTERVAL 1 MINUTE WHERE `partition` = 0")
	l := outbox.Lease{Partition: 0, Owner: "me", Version: 1}
	got, err := b.FindPendingBatch(ctx, l, 10)
	if err != nil {
		t.Fatal(err)
	}
	wantIDs(t, "fetch", got, "x")
	if err := b.MarkFailed(ctx, l, []outbox.Failure{{ID: "x", Error: "e"}}); err != nil {
		t.Fatal(err)
	}
	if err := b.MarkSent(ctx, l, []string{"x"}); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := db.QueryRow("SELECT COUNT(*) FROM `my box`").Scan(&n); err != nil || n != 0 {
		t.Fatalf("%d rows left (%v)", n, err)
	}
}

// noPrefetch is the Backend without its outbox.Prefetcher, for
// BenchmarkDrain's comparison.
type noPrefetch struct {
	outbox.Store
	outbox.BatchFetcher
}

// ackSink acknowledges every message after delay per Publish call (a
// broker's acknowledgement time).
type ackSink struct{ delay time.Duration }

func (s ackSink) Publish(ctx context.Context, msgs []outbox.Entry) []error {
	time.Sleep(s.delay)
	return make([]error, len(msgs))
}

// BenchmarkDrain drains a backlog of b.N entries (4 partitions, 1,000
// keys, inserted by plain SQL) through outbox.Relay into a sink that
// acknowledges everything, with FetchNext (prefetch=true) and without,
// for a sink that answers at once and one that takes 2 ms per call. It
// decides whether the Backend is an outbox.Prefetcher (docs/mysql.md).
func BenchmarkDrain(b *testing.B) {
	slog.SetDefault(slog.New(slog.NewTextHandler(io.Discard, nil)))
	for _, delay := range []time.Duration{0, 2 * time.Millisecond} {
		for _, prefetch := range []bool{true, false} {
			b.Run(fmt.Sprintf("sink=%v/prefetch=%v", delay, prefetch), func(b *testing.B) {
				drain(b, delay, prefetch)
			})
		}
	}
}

func drain(b *testing.B, delay time.Duration, prefetch bool) {
	be, db := newBackend(b, mysqloutbox.Options{Partitions: 4})
	exec(b, db, "SET SESSION max_recursive_iterations = 100000000")
	exec(b, db, fmt.Sprintf("INSERT INTO `outbox` (id, `partition`, topic, `key`, payload, created_at, next_at, last_error) "+
		"WITH RECURSIVE s(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM s WHERE n < %d) "+
		"SELECT CONCAT('id', n), n %% 4, 't', CONCAT('k', n %% 1000), REPEAT('x', 200), UTC_TIMESTAMP(6), UTC_TIMESTAMP(6), '' FROM s", b.N))
	var store outbox.Store = be
	if !prefetch {
		store = noPrefetch{be, be}
	}
	ctx := context.Background()
	b.ResetTimer()
	r, err := outbox.NewRelay(store, ackSink{delay}, outbox.RelayOptions{PollInterval: 5 * time.Millisecond})
	if err != nil {
		b.Fatal(err)
	}
	if err := r.Start(ctx); err != nil {
		b.Fatal(err)
	}
	for {
		var n int
		if err := db.QueryRow("SELECT COUNT(*) FROM `outbox`").Scan(&n); err != nil {
			b.Fatal(err)
		}
		if n == 0 {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	b.StopTimer()
	if err := r.Stop(ctx); err != nil {
		b.Fatal(err)
	}
}
