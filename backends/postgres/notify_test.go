package pgoutbox_test

import (
	"context"
	"database/sql"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/outboxrelay/outbox"
	pgoutbox "github.com/outboxrelay/outbox/backends/postgres"
)

// notes counts the values ch receives within d.
func notes(t *testing.T, ch <-chan struct{}, d time.Duration) int {
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
func arrives(t *testing.T, ch <-chan struct{}, limit time.Duration) bool {
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
func quiet(t *testing.T, ch <-chan struct{}) {
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
	loud, err := pgoutbox.New(p, pgoutbox.Options{Schema: quietB.Options().Schema})
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
