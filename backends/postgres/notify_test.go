package pgoutbox_test

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/outboxrelay/outbox"
	pgoutbox "github.com/outboxrelay/outbox/backends/postgres"
)

// notes counts the values ch receives within d.
func notes(t *testing.T, ch <-chan int, d time.Duration) int {
	t.Helper()
	timer := time.NewTimer(d)
	defer timer.Stop()
	n := 0
	for {
		select {
		case _, ok := <-ch:
			if !ok {
				t.Fatal("the Notifications channel was closed")
			}
			n++
		case <-timer.C:
			return n
		}
	}
}

// arrives reports whether ch receives a value within limit.
func arrives(t *testing.T, ch <-chan int, limit time.Duration) bool {
	t.Helper()
	select {
	case _, ok := <-ch:
		if !ok {
			t.Fatal("the Notifications channel was closed")
		}
		return true
	case <-time.After(limit):
		return false
	}
}

// quiet drains ch until it has been quiet for 300ms.
func quiet(t *testing.T, ch <-chan int) {
	t.Helper()
	for notes(t, ch, 300*time.Millisecond) > 0 {
	}
}

// txAPI is a transaction of either client library.
type txAPI struct {
	append   func(entries ...outbox.Entry) error
	commit   func() error
	rollback func() error
}

// begins returns a Begin per client library: pgx (AppendInTx) and
// database/sql (AppendInSQLTx).
func begins(t *testing.T, b *pgoutbox.Backend, db *sql.DB, p interface {
	Begin(context.Context) (pgx.Tx, error)
}) map[string]func() txAPI {
	ctx := t.Context()
	return map[string]func() txAPI{
		"pgx": func() txAPI {
			tx, err := p.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			// A failing test must not keep the connection (TestMain's
			// pool.Close would wait for it); after a commit, a no-op.
			t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
			return txAPI{
				append:   func(es ...outbox.Entry) error { return b.AppendInTx(ctx, tx, es...) },
				commit:   func() error { return tx.Commit(ctx) },
				rollback: func() error { return tx.Rollback(ctx) },
			}
		},
		"database/sql": func() txAPI {
			tx, err := db.BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = tx.Rollback() })
			return txAPI{
				append:   func(es ...outbox.Entry) error { return b.AppendInSQLTx(ctx, tx, es...) },
				commit:   tx.Commit,
				rollback: tx.Rollback,
			}
		},
	}
}

// TestTrailingNotificationFollowsCommitOnly forces the trailing path (a
// NotifyInterval of an hour: only a Backend's first append notifies in its
// transaction) and checks that the trailing notification waits for the
// commit, comes after it, and never comes for a rollback.
func TestTrailingNotificationFollowsCommitOnly(t *testing.T) {
	t.Parallel()
	for _, api := range []string{"pgx", "database/sql"} {
		t.Run(api, func(t *testing.T) {
			t.Parallel()
			b, p := newBackend(t, extended, pgoutbox.Options{NotifyInterval: time.Hour})
			db := stdlib.OpenDBFromPool(p)
			defer db.Close()
			begin := begins(t, b, db, p)[api]
			ch, err := b.Notifications(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			run := func(id string, commit bool) {
				t.Helper()
				tx := begin()
				if err := tx.append(outbox.Entry{ID: id, Topic: "t"}, outbox.Entry{ID: id + "-2", Topic: "t"}); err != nil {
					t.Fatal(err)
				}
				if !commit {
					if err := tx.rollback(); err != nil {
						t.Fatal(err)
					}
					return
				}
				// The trailer checks every NotifyInterval/4 at least while
				// the transaction is open: it must not notify yet.
				if n := notes(t, ch, 300*time.Millisecond); n > 0 {
					t.Fatalf("%s: %d notifications while the appending transaction was open", id, n)
				}
				if err := tx.commit(); err != nil {
					t.Fatal(err)
				}
			}
			run("first", true) // takes the in-transaction notification
			if !arrives(t, ch, 10*time.Second) {
				t.Fatal("no notification after the first commit")
			}
			quiet(t, ch)
			for i := range 3 {
				run(fmt.Sprint("trailed-", i), true)
				if !arrives(t, ch, 10*time.Second) {
					t.Fatalf("no trailing notification after commit %d", i)
				}
				quiet(t, ch)
			}
			run("rolled-back", false)
			if n := notes(t, ch, time.Second); n > 0 {
				t.Fatalf("%d notifications after a rolled-back append", n)
			}
			// A burst of single-entry appends, one transaction each.
			for i := range 20 {
				tx := begin()
				if err := tx.append(outbox.Entry{ID: fmt.Sprint("burst-", i), Topic: "t"}); err != nil {
					t.Fatal(err)
				}
				if err := tx.commit(); err != nil {
					t.Fatal(err)
				}
			}
			if !arrives(t, ch, 10*time.Second) {
				t.Fatal("no notification after a burst of commits")
			}
		})
	}
}

// TestNoNotifyAppendsSendNothing checks Options.NoNotify: its appends send
// no notification, while its Notifications still receive those of another
// Backend on the same channel.
func TestNoNotifyAppendsSendNothing(t *testing.T) {
	t.Parallel()
	quietB, p := newBackend(t, extended, pgoutbox.Options{NoNotify: true})
	loud, err := pgoutbox.New(t.Context(), p, pgoutbox.Options{Schema: quietB.Options().Schema})
	if err != nil {
		t.Fatal(err)
	}
	defer loud.Close()
	db := stdlib.OpenDBFromPool(p)
	defer db.Close()
	ctx := t.Context()
	ch, err := quietB.Notifications(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for api, begin := range begins(t, quietB, db, p) {
		for i := range 3 {
			tx := begin()
			if err := tx.append(outbox.Entry{ID: fmt.Sprint(api, i), Topic: "t"}); err != nil {
				t.Fatal(err)
			}
			if err := tx.commit(); err != nil {
				t.Fatal(err)
			}
		}
		if n := notes(t, ch, time.Second); n > 0 {
			t.Fatalf("%s: %d notifications after appends with NoNotify", api, n)
		}
	}
	if err := pgx.BeginFunc(ctx, p, func(tx pgx.Tx) error { return loud.AppendInTx(ctx, tx, outbox.Entry{Topic: "t"}) }); err != nil {
		t.Fatal(err)
	}
	if !arrives(t, ch, 10*time.Second) {
		t.Fatal("a NoNotify Backend's Notifications missed another Backend's notification")
	}
	st, err := quietB.Stats(ctx)
	if err != nil || st.Pending != 7 {
		t.Fatalf("Stats: %+v, %v; want 7 pending", st, err)
	}
}

// TestCloseWithOpenTrailedTransaction closes a Backend whose trailer is
// waiting for an open transaction: Close returns, and the transaction
// still commits its entries.
func TestCloseWithOpenTrailedTransaction(t *testing.T) {
	t.Parallel()
	b, p := newBackend(t, extended, pgoutbox.Options{NotifyInterval: time.Hour})
	ctx := t.Context()
	if err := pgx.BeginFunc(ctx, p, func(tx pgx.Tx) error { return b.AppendInTx(ctx, tx, outbox.Entry{Topic: "t"}) }); err != nil {
		t.Fatal(err)
	}
	tx, err := p.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if err := b.AppendInTx(ctx, tx, outbox.Entry{ID: "open", Topic: "t"}); err != nil {
		t.Fatal(err)
	}
	closed := make(chan error, 1)
	go func() { closed <- b.Close() }()
	select {
	case err := <-closed:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Close hung while the trailer waited for an open transaction")
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := p.QueryRow(ctx, "SELECT count(*) FROM "+pgx.Identifier{b.Options().Schema, "outbox"}.Sanitize()).Scan(&n); err != nil || n != 2 {
		t.Fatalf("%d rows (%v), want 2", n, err)
	}
}

// keyFor returns a key whose partition, of partitions, is p.
func keyFor(t *testing.T, p, partitions int) string {
	t.Helper()
	for i := range 1_000_000 {
		if k := fmt.Sprint("key-", i); outbox.PartitionOf(k, partitions) == p {
			return k
		}
	}
	t.Fatalf("no key for partition %d of %d", p, partitions)
	return ""
}

// collect waits up to 10s for a first value on ch, then gathers values
// until ch has been quiet for 300ms, and returns them sorted.
func collect(t *testing.T, ch <-chan int) []int {
	t.Helper()
	var got []int
	select {
	case p, ok := <-ch:
		if !ok {
			t.Fatal("the Notifications channel was closed")
		}
		got = append(got, p)
	case <-time.After(10 * time.Second):
		t.Fatal("no notification")
	}
	for {
		select {
		case p, ok := <-ch:
			if !ok {
				t.Fatal("the Notifications channel was closed")
			}
			got = append(got, p)
			continue
		case <-time.After(300 * time.Millisecond):
		}
		slices.Sort(got)
		return got
	}
}

// TestNotificationsCarryPartitions checks that a commit's notification
// names the partitions it appended to, and no others, both when the append
// notifies in its transaction and when the trailer notifies for it, with
// either client library.
func TestNotificationsCarryPartitions(t *testing.T) {
	t.Parallel()
	const partitions = 8
	paths := map[string]time.Duration{
		"in-transaction": -1,        // every append notifies in its transaction
		"trailing":       time.Hour, // every append but a Backend's first trails
	}
	for path, interval := range paths {
		for _, api := range []string{"pgx", "database/sql"} {
			t.Run(path+"/"+api, func(t *testing.T) {
				t.Parallel()
				b, p := newBackend(t, extended, pgoutbox.Options{Partitions: partitions, NotifyInterval: interval})
				db := stdlib.OpenDBFromPool(p)
				defer db.Close()
				begin := begins(t, b, db, p)[api]
				ch, err := b.Notifications(t.Context())
				if err != nil {
					t.Fatal(err)
				}
				commit := func(tx txAPI, keys ...string) {
					t.Helper()
					var es []outbox.Entry
					for i, k := range keys {
						es = append(es, outbox.Entry{ID: fmt.Sprint(k, "-", i, "-", time.Now().UnixNano()), Topic: "t", Key: k})
					}
					if err := tx.append(es...); err != nil {
						t.Fatal(err)
					}
					if err := tx.commit(); err != nil {
						t.Fatal(err)
					}
				}
				// A Backend's first append notifies in its transaction on
				// either path; take it out of the way.
				commit(begin(), keyFor(t, 0, partitions))
				collect(t, ch)

				commit(begin(), keyFor(t, 3, partitions))
				if got := collect(t, ch); !slices.Equal(got, []int{3}) {
					t.Fatalf("a commit to partition 3 delivered %v, want [3]", got)
				}
				k1, k5 := keyFor(t, 1, partitions), keyFor(t, 5, partitions)
				commit(begin(), k5, k1, k5)
				if got := collect(t, ch); !slices.Equal(got, []int{1, 5}) {
					t.Fatalf("a commit to partitions 1 and 5 delivered %v, want [1 5]", got)
				}
				// Two transactions committed together: the union (in one
				// trailing notification, or two).
				tx2, tx6 := begin(), begin()
				commit(tx2, keyFor(t, 2, partitions))
				commit(tx6, keyFor(t, 6, partitions))
				if got := collect(t, ch); !slices.Equal(got, []int{2, 6}) {
					t.Fatalf("commits to partitions 2 and 6 delivered %v, want [2 6]", got)
				}
				// A rolled-back append to partition 4 next to a committed
				// one to partition 7: only 7.
				tx4 := begin()
				if err := tx4.append(outbox.Entry{ID: "rolled-back", Topic: "t", Key: keyFor(t, 4, partitions)}); err != nil {
					t.Fatal(err)
				}
				commit(begin(), keyFor(t, 7, partitions))
				if err := tx4.rollback(); err != nil {
					t.Fatal(err)
				}
				if got := collect(t, ch); !slices.Equal(got, []int{7}) {
					t.Fatalf("a commit to partition 7 next to a rolled-back append to 4 delivered %v, want [7]", got)
				}
			})
		}
	}
}

// TestNotificationPayloads sends payloads by hand and checks what the
// listener makes of them: the listed partitions, or AllPartitions for an
// empty or unparseable payload or one out of range.
func TestNotificationPayloads(t *testing.T) {
	t.Parallel()
	b, p := newBackend(t, extended, pgoutbox.Options{Partitions: 8})
	ch, err := b.Notifications(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	all := []int{outbox.AllPartitions}
	for _, c := range []struct {
		payload string
		want    []int
	}{
		{"3", []int{3}},
		{"1,5,7", []int{1, 5, 7}},
		{"", all},
		{"x", all},
		{"2,", all},
		{"2,8", all},
		{"-1", all},
		{"0", []int{0}},
	} {
		if _, err := p.Exec(t.Context(), "SELECT pg_notify($1, $2)", b.Options().Channel, c.payload); err != nil {
			t.Fatal(err)
		}
		if got := collect(t, ch); !slices.Equal(got, c.want) {
			t.Errorf("payload %q delivered %v, want %v", c.payload, got, c.want)
		}
	}
}

// TestNotificationsBufferFull checks the documented buffer: 256 values; a
// notification whose partitions do not all fit sends AllPartitions
// instead; one that finds the buffer full is dropped.
func TestNotificationsBufferFull(t *testing.T) {
	t.Parallel()
	b, p := newBackend(t, extended, pgoutbox.Options{Partitions: 8})
	ctx := t.Context()
	ch, err := b.Notifications(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// A second subscriber, read at once, tells when the listener has
	// handled the last notification (for every subscriber: it handles
	// notifications one at a time).
	watch, err := b.Notifications(ctx)
	if err != nil {
		t.Fatal(err)
	}
	const marker = 7
	handled := make(chan struct{})
	go func() {
		for p := range watch {
			if p == marker {
				close(handled)
				return
			}
		}
	}()
	notify := func(payload string) {
		t.Helper()
		if _, err := p.Exec(ctx, "SELECT pg_notify($1, $2)", b.Options().Channel, payload); err != nil {
			t.Fatal(err)
		}
	}
	// pg_notify drops duplicates within one transaction, so the 255
	// notifications go in 255 statements.
	for i := range 255 {
		notify(fmt.Sprint(i % 3))
	}
	notify("1,2") // room for 1 of 2: AllPartitions
	notify("3")   // full: dropped
	notify(fmt.Sprint(marker))
	select {
	case <-handled:
	case <-time.After(10 * time.Second):
		t.Fatal("the marker notification did not arrive")
	}
	if cap(ch) != 256 || len(ch) != 256 {
		t.Fatalf("buffer holds %d of %d values, want 256 of 256", len(ch), cap(ch))
	}
	var got []int
	for range 256 {
		got = append(got, <-ch)
	}
	if got[255] != outbox.AllPartitions || slices.Contains(got[:255], outbox.AllPartitions) || slices.Contains(got, 3) || slices.Contains(got, marker) {
		t.Fatalf("got %v; want 255 partitions below 3, then AllPartitions", got)
	}
}

// TestNotifyPayloadsSplit appends to 1,500 partitions in one transaction
// and checks, on a plain LISTEN connection, that the partitions arrive
// split over notifications within PostgreSQL's 8000-byte payload limit,
// each partition once, on both paths.
func TestNotifyPayloadsSplit(t *testing.T) {
	t.Parallel()
	const partitions = 1500
	for path, interval := range map[string]time.Duration{"in-transaction": -1, "trailing": time.Hour} {
		t.Run(path, func(t *testing.T) {
			t.Parallel()
			b, p := newBackend(t, extended, pgoutbox.Options{Partitions: partitions, NotifyInterval: interval})
			ctx := t.Context()
			conn, err := pgx.ConnectConfig(ctx, p.Config().ConnConfig.Copy())
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close(context.Background())
			if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{b.Options().Channel}.Sanitize()); err != nil {
				t.Fatal(err)
			}
			payloads := func() []string {
				var out []string
				for {
					wctx, cancel := context.WithTimeout(ctx, time.Second)
					n, err := conn.WaitForNotification(wctx)
					cancel()
					if err != nil {
						if ctx.Err() != nil {
							t.Fatal(err)
						}
						return out // quiet for a second
					}
					out = append(out, n.Payload)
				}
			}
			appendTx := func(es []outbox.Entry) {
				if err := pgx.BeginFunc(ctx, p, func(tx pgx.Tx) error { return b.AppendInTx(ctx, tx, es...) }); err != nil {
					t.Fatal(err)
				}
			}
			appendTx([]outbox.Entry{{ID: "first", Topic: "t"}}) // a Backend's first append notifies in its transaction
			payloads()
			var es []outbox.Entry
			covered := map[int]bool{}
			for i := 0; len(covered) < partitions; i++ {
				k := fmt.Sprint("k", i)
				if part := outbox.PartitionOf(k, partitions); !covered[part] {
					covered[part] = true
					es = append(es, outbox.Entry{Topic: "t", Key: k})
				}
			}
			appendTx(es)
			got := payloads()
			if len(got) < 3 {
				t.Fatalf("%d notifications for 1,500 partitions, want them split over at least 3 (700 per payload)", len(got))
			}
			seen := map[int]int{}
			for _, pl := range got {
				if len(pl) >= 8000 {
					t.Errorf("a payload of %d bytes", len(pl))
				}
				for f := range strings.SplitSeq(pl, ",") {
					n, err := strconv.Atoi(f)
					if err != nil {
						t.Fatalf("payload element %q: %v", f, err)
					}
					seen[n]++
				}
			}
			for part := range partitions {
				if seen[part] != 1 {
					t.Errorf("partition %d listed %d times, want once", part, seen[part])
				}
			}
			if len(seen) != partitions {
				t.Errorf("%d partitions listed, want %d", len(seen), partitions)
			}
		})
	}
}
