package pgoutbox_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/outboxrelay/outbox"
	pgoutbox "github.com/outboxrelay/outbox/backends/postgres"
)

func appendErr(ctx context.Context, b *pgoutbox.Backend, p *pgxpool.Pool, es ...outbox.Entry) error {
	return pgx.BeginFunc(ctx, p, func(tx pgx.Tx) error { return b.AppendInTx(ctx, tx, es...) })
}

func sealed(t *testing.T, b *pgoutbox.Backend) bool {
	t.Helper()
	s, err := b.Sealed(t.Context())
	if err != nil {
		t.Fatalf("Sealed: %v", err)
	}
	return s
}

func TestSeal(t *testing.T) {
	t.Parallel()
	for _, opts := range []pgoutbox.Options{{}, {KeySequence: true}} {
		t.Run("KeySequence="+map[bool]string{false: "off", true: "on"}[opts.KeySequence], func(t *testing.T) {
			t.Parallel()
			b, p := newBackend(t, extended, opts)
			ctx := t.Context()
			appendOne(t, b, p, outbox.Entry{ID: "before1", Topic: "t", Key: "k"}, outbox.Entry{ID: "before2", Topic: "t", Key: "k"},
				outbox.Entry{ID: "park", Topic: "t", Key: "p"})
			if sealed(t, b) {
				t.Fatal("a new outbox is sealed")
			}
			if err := b.Unseal(ctx); err != nil { // not sealed: a no-op
				t.Fatal(err)
			}
			for range 2 { // sealing twice is a no-op
				if err := b.Seal(ctx); err != nil {
					t.Fatal(err)
				}
			}
			if !sealed(t, b) {
				t.Fatal("Sealed is false after Seal")
			}
			// Every append fails: one entry, several, an ID already there
			// (idempotent re-append), through database/sql too.
			for _, es := range [][]outbox.Entry{
				{{ID: "new", Topic: "t", Key: "k"}},
				{{Topic: "t", Key: "k"}, {Topic: "t"}},
				{{ID: "before1", Topic: "t", Key: "k"}},
			} {
				err := appendErr(ctx, b, p, es...)
				if !errors.Is(err, outbox.ErrSealed) || !strings.Contains(err.Error(), b.Options().Schema) || !strings.Contains(err.Error(), "destination") {
					t.Fatalf("append to a sealed outbox: %v; want ErrSealed naming the outbox and the fix", err)
				}
			}
			db := stdlib.OpenDBFromPool(p)
			defer db.Close()
			tx, err := db.BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			if err := b.AppendInSQLTx(ctx, tx, outbox.Entry{Topic: "t", Key: "k"}); !errors.Is(err, outbox.ErrSealed) {
				t.Fatalf("AppendInSQLTx to a sealed outbox: %v", err)
			}
			_ = tx.Rollback()
			// Everything else works on the entries that are there.
			l := acquire(t, b, 0)
			if got := fetchIDs(t, b, l); len(got) != 3 {
				t.Fatalf("fetched %v while sealed", got)
			}
			if err := b.MarkFailed(ctx, l, []outbox.Failure{{ID: "park", Error: "x", Park: true}, {ID: "before2", Error: "y"}}); err != nil {
				t.Fatal(err)
			}
			if n, err := b.Requeue(ctx, "park"); n != 1 || err != nil {
				t.Fatalf("Requeue while sealed = %d, %v", n, err)
			}
			if err := b.MarkSent(ctx, l, []string{"before1"}); err != nil {
				t.Fatal(err)
			}
			if err := b.Cancel(ctx, "before2"); err != nil {
				t.Fatal(err)
			}
			if n, err := b.Import(ctx, []outbox.EntryInfo{imported("imported", "k")}); n != 1 || err != nil {
				t.Fatalf("Import into a sealed outbox = %d, %v", n, err)
			}
			if ex, err := b.ExportBatch(ctx, l, 10); err != nil || len(ex) != 2 {
				t.Fatalf("ExportBatch while sealed = %v, %v", ex, err)
			}
			if opts.KeySequence { // the refused appends took no number
				var last int64
				if err := p.QueryRow(ctx, "SELECT last FROM "+pgx.Identifier{b.Options().Schema, "outbox_keyseq"}.Sanitize()+" WHERE key = 'k'").Scan(&last); err != nil || last != 2 {
					t.Fatalf("key k's counter is %d (%v), want 2", last, err)
				}
			}
			if err := b.Unseal(ctx); err != nil {
				t.Fatal(err)
			}
			if sealed(t, b) {
				t.Fatal("Sealed is true after Unseal")
			}
			if err := appendErr(ctx, b, p, outbox.Entry{ID: "after", Topic: "t", Key: "k"}); err != nil {
				t.Fatalf("append after Unseal: %v", err)
			}
		})
	}
}

// waitForStatementLock waits until a statement containing marker waits on a
// lock.
func waitForStatementLock(t *testing.T, p *pgxpool.Pool, marker string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		var n int
		if err := p.QueryRow(t.Context(), "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND strpos(query, $1) > 0", marker).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("no statement with %q waits on a lock", marker)
}

// TestSealWaitsForOpenAppends: an append in a transaction that is open
// when Seal is called commits before Seal returns (or rolls back); an
// append made after Seal was called fails with ErrSealed.
func TestSealWaitsForOpenAppends(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		commit, keySeq bool
	}{{true, false}, {false, false}, {true, true}, {false, true}} {
		commit := c.commit
		t.Run(fmt.Sprintf("Commit=%v/KeySequence=%v", c.commit, c.keySeq), func(t *testing.T) {
			t.Parallel()
			b, p := newBackend(t, extended, pgoutbox.Options{KeySequence: c.keySeq})
			ctx := t.Context()
			schema := b.Options().Schema
			open, err := p.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer open.Rollback(context.Background())
			if err := b.AppendInTx(ctx, open, outbox.Entry{ID: "open", Topic: "t", Key: "k"}); err != nil {
				t.Fatal(err)
			}
			late, err := p.Begin(ctx) // begun before Seal, appends after it was called
			if err != nil {
				t.Fatal(err)
			}
			defer late.Rollback(context.Background())
			sealDone := make(chan error, 1)
			go func() { sealDone <- b.Seal(ctx) }()
			waitForStatementLock(t, p, schema) // Seal waits for the open append
			lateDone := make(chan error, 1)
			go func() {
				lateDone <- b.AppendInTx(ctx, late, outbox.Entry{ID: "late", Topic: "t", Key: "k"})
			}()
			time.Sleep(50 * time.Millisecond)
			select {
			case err := <-sealDone:
				t.Fatalf("Seal returned (%v) while a transaction that appended was open", err)
			default:
			}
			// The open transaction can still append and commit.
			if err := b.AppendInTx(ctx, open, outbox.Entry{ID: "open2", Topic: "t", Key: "k"}); err != nil {
				t.Fatalf("second append of the open transaction: %v", err)
			}
			if commit {
				err = open.Commit(ctx)
			} else {
				err = open.Rollback(ctx)
			}
			if err != nil {
				t.Fatal(err)
			}
			if err := <-sealDone; err != nil {
				t.Fatalf("Seal: %v", err)
			}
			if err := <-lateDone; !errors.Is(err, outbox.ErrSealed) {
				t.Fatalf("append after Seal was called: %v, want ErrSealed", err)
			}
			_ = late.Rollback(ctx)
			s, err := b.Stats(ctx)
			want := int64(0)
			if commit {
				want = 2
			}
			if err != nil || s.Pending != want {
				t.Fatalf("Stats = %+v, %v; want %d pending", s, err, want)
			}
			if err := appendErr(ctx, b, p, outbox.Entry{Topic: "t"}); !errors.Is(err, outbox.ErrSealed) {
				t.Fatalf("append after Seal returned: %v", err)
			}
		})
	}
}

// TestNewBeforeMigration007: New refuses an outbox at migration 005 or
// 006 (MarkFailed and the fetch use migration 007's columns and tables)
// with an error that says to migrate; after Migrate, a Backend works on
// the entries appended before (a Backend of the previous version would
// append them), and migrating down from a sealed outbox drops the seal.
func TestNewBeforeMigration007(t *testing.T) {
	t.Parallel()
	p := pool(t, extended)
	ctx := t.Context()
	opts := pgoutbox.Options{Schema: freshSchema(t, p), Partitions: 1}
	for _, v := range []int{5, 6} {
		if err := pgoutbox.MigrateTo(ctx, p, opts, v); err != nil {
			t.Fatal(err)
		}
		_, err := pgoutbox.New(ctx, p, opts)
		if err == nil || !strings.Contains(err.Error(), "migration 007") || !strings.Contains(err.Error(), "migrate up") {
			t.Fatalf("New at migration %03d: %v; want an error that says to run migration 007", v, err)
		}
	}
	if _, err := p.Exec(ctx, "INSERT INTO "+pgx.Identifier{opts.Schema, "outbox"}.Sanitize()+
		" (id, partition, topic, key, created_at, next_at) VALUES ('a', 0, 't', 'k', now(), now())"); err != nil {
		t.Fatal(err)
	}
	if err := pgoutbox.Migrate(ctx, p, opts); err != nil {
		t.Fatal(err)
	}
	b, err := pgoutbox.New(ctx, p, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	l := acquire(t, b, 0)
	if got := fetchIDs(t, b, l); len(got) != 1 {
		t.Fatalf("fetched %v after migrating from 006", got)
	}
	// Down to 005 drops the seal with its trigger; appends work again.
	if err := b.Seal(ctx); err != nil {
		t.Fatal(err)
	}
	if err := pgoutbox.MigrateTo(ctx, p, opts, 5); err != nil {
		t.Fatal(err)
	}
	if err := appendErr(ctx, b, p, outbox.Entry{Topic: "t"}); err != nil {
		t.Fatalf("append after migrating down from a sealed outbox: %v", err)
	}
}

// TestMovePgBouncer: Hold, Seal (and its race with an open append),
// Import and Export through PgBouncer in transaction pooling mode.
func TestMovePgBouncer(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{"simple_protocol", "exec"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			through := bouncerPool(t, mode)
			direct := pool(t, pgx.QueryExecModeSimpleProtocol)
			ctx := t.Context()
			o := pgoutbox.Options{Schema: freshSchema(t, direct), Partitions: 1, NoNotify: true}
			if err := pgoutbox.Migrate(ctx, direct, o); err != nil {
				t.Fatal(err)
			}
			b, err := pgoutbox.New(ctx, through, o)
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			if err := b.Hold(ctx, "bouncer"); err != nil {
				t.Fatal(err)
			}
			appendOne(t, b, through, outbox.Entry{ID: "A", Topic: "t", Key: "k"})
			mustImport(t, b, imported("I", "k"))
			l := acquire(t, b, 0)
			if got := fetchIDs(t, b, l); len(got) != 0 {
				t.Fatalf("held: fetched %v", got)
			}
			if err := b.Unhold(ctx); err != nil {
				t.Fatal(err)
			}
			if got := fetchIDs(t, b, l); len(got) != 2 || got[0] != "I" {
				t.Fatalf("fetched %v, want [I A]", got)
			}
			if ex, err := b.ExportBatch(ctx, l, 10); err != nil || len(ex) != 2 || ex[0].ID != "I" {
				t.Fatalf("ExportBatch = %v, %v", ex, err)
			}
			open, err := through.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer open.Rollback(context.Background())
			if err := b.AppendInTx(ctx, open, outbox.Entry{ID: "open", Topic: "t"}); err != nil {
				t.Fatal(err)
			}
			sealDone := make(chan error, 1)
			go func() { sealDone <- b.Seal(ctx) }()
			waitForStatementLock(t, direct, o.Schema)
			if err := open.Commit(ctx); err != nil {
				t.Fatal(err)
			}
			if err := <-sealDone; err != nil {
				t.Fatal(err)
			}
			if !sealed(t, b) {
				t.Fatal("not sealed")
			}
			if err := appendErr(ctx, b, through, outbox.Entry{Topic: "t"}); !errors.Is(err, outbox.ErrSealed) {
				t.Fatalf("append through PgBouncer to a sealed outbox: %v", err)
			}
			if err := b.RemoveExported(ctx, l, []string{"I", "A", "open"}); err != nil {
				t.Fatal(err)
			}
			if err := b.Unseal(ctx); err != nil {
				t.Fatal(err)
			}
			if err := appendErr(ctx, b, through, outbox.Entry{Topic: "t"}); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// Seal builds the (partition, seq) index the export reads through, and
// the export plan uses it (no sort of the partition); Unseal drops it.
func TestSealBuildsTheExportIndex(t *testing.T) {
	t.Parallel()
	b, p := newBackend(t, extended, pgoutbox.Options{})
	ctx := t.Context()
	schema := b.Options().Schema
	exists := func() bool {
		t.Helper()
		var ok bool
		if err := p.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_indexes WHERE schemaname = $1 AND indexname = 'outbox_export_idx')", schema).Scan(&ok); err != nil {
			t.Fatal(err)
		}
		return ok
	}
	if exists() {
		t.Fatal("a new outbox has the export index")
	}
	if err := b.Seal(ctx); err != nil {
		t.Fatal(err)
	}
	if !exists() {
		t.Fatal("Seal did not build the export index")
	}
	var plan string
	table := pgx.Identifier{schema, "outbox"}.Sanitize()
	// One connection for the setting and the plan (a tiny table would
	// otherwise be read sequentially and sorted, index or not).
	conn, err := p.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, "SET enable_seqscan = off"); err != nil {
		t.Fatal(err)
	}
	defer conn.Exec(context.Background(), "RESET enable_seqscan") //nolint:errcheck
	rows, err := conn.Query(ctx, "EXPLAIN SELECT seq FROM "+table+" WHERE partition = 0 ORDER BY seq LIMIT 500")
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var line string
		if err := rows.Scan(&line); err != nil {
			t.Fatal(err)
		}
		plan += line + "\n"
	}
	if rows.Err() != nil {
		t.Fatal(rows.Err())
	}
	if !strings.Contains(plan, "outbox_export_idx") || strings.Contains(plan, "Sort") {
		t.Errorf("the export's order does not come from the index:\n%s", plan)
	}
	if err := b.Unseal(ctx); err != nil {
		t.Fatal(err)
	}
	if exists() {
		t.Fatal("Unseal left the export index")
	}
}

// A build of the export index that failed (a lock timeout, a cancel)
// leaves an INVALID index of that name, which PostgreSQL never uses and
// CREATE INDEX CONCURRENTLY IF NOT EXISTS skips: Seal run again rebuilds
// it, as docs/postgres.md promises, instead of leaving the export to sort
// the partition on every call.
func TestSealRebuildsAnInvalidExportIndex(t *testing.T) {
	t.Parallel()
	b, p := newBackend(t, extended, pgoutbox.Options{})
	ctx := t.Context()
	schema := b.Options().Schema
	table := pgx.Identifier{schema, "outbox"}.Sanitize()
	appendOne(t, b, p, outbox.Entry{ID: "a", Topic: "t", Key: "k"}, outbox.Entry{ID: "b", Topic: "t", Key: "k"})
	// A concurrent build that fails part way (here: a unique index over
	// duplicates) leaves its index behind, INVALID.
	if _, err := p.Exec(ctx, "CREATE UNIQUE INDEX CONCURRENTLY outbox_export_idx ON "+table+" (partition)"); err == nil {
		t.Fatal("the failing build succeeded")
	}
	valid := func() (exists, ok bool) {
		t.Helper()
		err := p.QueryRow(ctx, `SELECT i.indisvalid FROM pg_index AS i
			JOIN pg_class AS c ON c.oid = i.indexrelid JOIN pg_namespace AS n ON n.oid = c.relnamespace
			WHERE n.nspname = $1 AND c.relname = 'outbox_export_idx'`, schema).Scan(&ok)
		if errors.Is(err, pgx.ErrNoRows) {
			return false, false
		}
		if err != nil {
			t.Fatal(err)
		}
		return true, ok
	}
	if exists, ok := valid(); !exists || ok {
		t.Fatalf("after the failed build: index exists %v, valid %v; want an invalid index", exists, ok)
	}
	if err := b.Seal(ctx); err != nil {
		t.Fatal(err)
	}
	if exists, ok := valid(); !exists || !ok {
		t.Fatalf("after Seal: export index exists %v, valid %v; want a valid index (Seal rebuilds an invalid one)", exists, ok)
	}
	if err := b.Unseal(ctx); err != nil {
		t.Fatal(err)
	}
	if exists, _ := valid(); exists {
		t.Fatal("Unseal left the export index")
	}
}
