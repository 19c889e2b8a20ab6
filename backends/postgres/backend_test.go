package pgoutbox_test

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxrelay/outbox"
	pgoutbox "github.com/outboxrelay/outbox/backends/postgres"
)

const extended = pgx.QueryExecModeCacheStatement

func appendN(t *testing.T, b *pgoutbox.Backend, p *pgxpool.Pool, prefix string, n int, key func(i int) string) []string {
	t.Helper()
	ctx := t.Context()
	var ids []string
	for start := 0; start < n; start += 500 {
		var es []outbox.Entry
		for i := start; i < min(n, start+500); i++ {
			id := fmt.Sprintf("%s%06d", prefix, i)
			ids = append(ids, id)
			es = append(es, outbox.Entry{ID: id, Topic: "t", Key: key(i), Payload: []byte(id)})
		}
		err := pgx.BeginFunc(ctx, p, func(tx pgx.Tx) error { return b.AppendInTx(ctx, tx, es...) })
		if err != nil {
			t.Fatalf("AppendInTx: %v", err)
		}
	}
	return ids
}

func tableExists(t *testing.T, p *pgxpool.Pool, schema, table string) bool {
	t.Helper()
	var ok bool
	err := p.QueryRow(t.Context(), "SELECT to_regclass($1) IS NOT NULL", pgx.Identifier{schema, table}.Sanitize()).Scan(&ok)
	if err != nil {
		t.Fatal(err)
	}
	return ok
}

func TestMigrateUpDownUp(t *testing.T) {
	t.Parallel()
	p := pool(t, extended)
	ctx := t.Context()
	opts := pgoutbox.Options{Schema: freshSchema(t, p), Table: "My Outbox", Partitions: 2}
	tables := []string{"My Outbox", "My Outbox_lease", "My Outbox_archive", "My Outbox_meta", "My Outbox_member"}
	for round := range 2 {
		if err := pgoutbox.Migrate(ctx, p, opts); err != nil {
			t.Fatalf("round %d: Migrate up: %v", round, err)
		}
		for _, tb := range tables {
			if !tableExists(t, p, opts.Schema, tb) {
				t.Fatalf("round %d: table %q missing after Migrate", round, tb)
			}
		}
		if err := pgoutbox.Migrate(ctx, p, opts); err != nil {
			t.Fatalf("round %d: Migrate again (no-op): %v", round, err)
		}
		b, err := pgoutbox.New(ctx, p, pgoutbox.Options{Schema: opts.Schema, Table: opts.Table})
		if err != nil {
			t.Fatal(err)
		}
		if b.Partitions() != 2 {
			t.Fatalf("round %d: New with Partitions 0 reports %d partitions, want the stored 2", round, b.Partitions())
		}
		appendN(t, b, p, "m", 3, func(int) string { return "k" })
		if err := pgoutbox.MigrateTo(ctx, p, opts, 1); err != nil {
			t.Fatalf("round %d: MigrateTo 1: %v", round, err)
		}
		for _, tb := range tables[2:] {
			if tableExists(t, p, opts.Schema, tb) {
				t.Fatalf("round %d: table %q still there after MigrateTo 1", round, tb)
			}
		}
		if !tableExists(t, p, opts.Schema, "My Outbox") || !tableExists(t, p, opts.Schema, "My Outbox_lease") {
			t.Fatalf("round %d: MigrateTo 1 dropped the outbox or lease table", round)
		}
		if err := pgoutbox.MigrateTo(ctx, p, opts, 0); err != nil {
			t.Fatalf("round %d: MigrateTo 0: %v", round, err)
		}
		for _, tb := range tables {
			if tableExists(t, p, opts.Schema, tb) {
				t.Fatalf("round %d: table %q still there after MigrateTo 0", round, tb)
			}
		}
		_, err = b.AcquireLease(ctx, 0, "o", time.Second)
		if err == nil || !strings.Contains(err.Error(), "pgoutbox.Migrate") {
			t.Fatalf("round %d: AcquireLease on dropped tables: got %v, want an error telling to run pgoutbox.Migrate", round, err)
		}
	}
	if err := pgoutbox.MigrateTo(ctx, p, opts, pgoutbox.LatestVersion()+1); err == nil {
		t.Fatal("MigrateTo an unknown version succeeded")
	}
}

// TestMigrationFilesForOtherTools runs the migration files as goose or
// golang-migrate would, unchanged but for the partition placeholder,
// which the user replaces.

func TestMigrationFilesForOtherTools(t *testing.T) {
	t.Parallel()
	p := pool(t, extended)
	ctx := t.Context()
	schema := freshSchema(t, p)
	files, err := fs.Glob(pgoutbox.Migrations, "*.up.sql")
	if err != nil || len(files) != migrationCount(t) {
		t.Fatalf("Migrations has up files %v (err %v), want %d", files, err, migrationCount(t))
	}
	// What goose or golang-migrate would do: run the files unchanged with
	// search_path set to the schema.
	err = pgx.BeginFunc(ctx, p, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "CREATE SCHEMA "+pgx.Identifier{schema}.Sanitize()+"; SET LOCAL search_path TO "+pgx.Identifier{schema}.Sanitize()); err != nil {
			return err
		}
		for _, f := range files {
			sql, err := fs.ReadFile(pgoutbox.Migrations, f)
			if err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, strings.ReplaceAll(string(sql), "{partitions}", "3")); err != nil {
				return fmt.Errorf("%s: %w", f, err)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	b, err := pgoutbox.New(ctx, p, pgoutbox.Options{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if b.Partitions() != 3 {
		t.Fatalf("Partitions() = %d, want the 3 the files stored", b.Partitions())
	}
	appendN(t, b, p, "g", 2, func(int) string { return "" })
	l, err := b.AcquireLease(ctx, outbox.PartitionOf("", 3), "o", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	got, err := b.FindPendingBatch(ctx, l, 10)
	if err != nil || len(got) != 2 {
		t.Fatalf("FindPendingBatch on tables made by the raw files: %v, %v", got, err)
	}
}

func TestMigrateConcurrentCallers(t *testing.T) {
	t.Parallel()
	p := pool(t, extended)
	opts := pgoutbox.Options{Schema: freshSchema(t, p), Partitions: 4}
	var wg sync.WaitGroup
	errs := make(chan error, 6)
	for range 6 {
		wg.Go(func() { errs <- pgoutbox.Migrate(t.Context(), p, opts) })
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Errorf("concurrent Migrate: %v", err)
		}
	}
	var n int
	if err := p.QueryRow(t.Context(), "SELECT count(*) FROM "+pgx.Identifier{opts.Schema, "outbox_migrations"}.Sanitize()).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != migrationCount(t) {
		t.Fatalf("%d migrations recorded, want %d", n, migrationCount(t))
	}
}

func TestMissingTableSaysRunMigrate(t *testing.T) {
	t.Parallel()
	b, p := newBackend(t, extended, pgoutbox.Options{})
	ctx := t.Context()
	if err := pgoutbox.MigrateTo(ctx, p, b.Options(), 0); err != nil {
		t.Fatal(err)
	}
	tx, err := p.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	err = b.AppendInTx(ctx, tx, outbox.Entry{Topic: "t"})
	if err == nil || !strings.Contains(err.Error(), "run pgoutbox.Migrate") {
		t.Fatalf("AppendInTx without tables: %v; want an error that says to run pgoutbox.Migrate", err)
	}
	if _, err := b.Stats(ctx); err == nil || !strings.Contains(err.Error(), "run pgoutbox.Migrate") {
		t.Fatalf("Stats without tables: %v; want an error that says to run pgoutbox.Migrate", err)
	}
}

func TestSamePartitionCannotBeDoubleClaimed(t *testing.T) {
	t.Parallel()
	b, _ := newBackend(t, extended, pgoutbox.Options{})
	var wg sync.WaitGroup
	results := make(chan error, 8)
	for i := range 8 {
		wg.Go(func() {
			_, err := b.AcquireLease(t.Context(), 0, fmt.Sprintf("owner-%d", i), time.Minute)
			results <- err
		})
	}
	wg.Wait()
	close(results)
	won := 0
	for err := range results {
		switch {
		case err == nil:
			won++
		case !errors.Is(err, outbox.ErrLeaseHeld):
			t.Errorf("AcquireLease: %v, want nil or ErrLeaseHeld", err)
		}
	}
	if won != 1 {
		t.Fatalf("%d owners got partition 0 at once, want exactly 1", won)
	}
}

// drain runs a claim loop as a relay would until the outbox is empty or
// ctx ends, recording every ID it marks sent. Errors make it re-acquire.
func drain(ctx context.Context, b *pgoutbox.Backend, owner string, ttl time.Duration, sent func(ids []string)) error {
	for ctx.Err() == nil {
		idle := true
		for p := range b.Partitions() {
			l, err := b.AcquireLease(ctx, p, owner, ttl)
			if err != nil {
				continue
			}
			batch, err := b.FindPendingBatch(ctx, l, 50)
			if err != nil || len(batch) == 0 {
				continue
			}
			idle = false
			ids := make([]string, len(batch))
			for i, e := range batch {
				ids[i] = e.ID
			}
			if err := b.MarkSent(ctx, l, ids); err == nil {
				sent(ids)
			} else if errors.Is(err, outbox.ErrLeaseLost) {
				continue
			} else {
				// Connection trouble: the outcome is unknown, so the
				// IDs count as published (at least once).
				sent(ids)
			}
		}
		if idle {
			st, err := b.Stats(ctx)
			if err == nil && st.Pending == 0 {
				return nil
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	return ctx.Err()
}

func TestConcurrentClaimersGetDisjointRows(t *testing.T) {
	t.Parallel()
	b, p := newBackend(t, extended, pgoutbox.Options{Partitions: 4})
	ids := appendN(t, b, p, "d", 2000, func(i int) string { return fmt.Sprint("key-", i%37) })
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	var mu sync.Mutex
	seen := map[string]int{}
	var wg sync.WaitGroup
	for r := range 4 {
		wg.Go(func() {
			err := drain(ctx, b, fmt.Sprint("relay-", r), time.Minute, func(got []string) {
				mu.Lock()
				defer mu.Unlock()
				for _, id := range got {
					seen[id]++
				}
			})
			if err != nil {
				t.Errorf("relay %d: %v", r, err)
			}
		})
	}
	wg.Wait()
	for _, id := range ids {
		if seen[id] != 1 {
			t.Errorf("entry %s was sent %d times, want exactly once (no lease was lost)", id, seen[id])
		}
	}
}

func TestTerminatedConnectionsLoseNothing(t *testing.T) {
	t.Parallel()
	// A pool of its own, tagged so only its connections are terminated.
	base := pool(t, extended)
	cfg := base.Config().Copy()
	app := "pgoutbox-terminate-" + freshSchema(t, base)[len("pgoutbox_test_"):]
	cfg.ConnConfig.RuntimeParams["application_name"] = app
	cfg.MaxConns = 3
	p, err := pgxpool.NewWithConfig(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	opts := pgoutbox.Options{Schema: freshSchema(t, base), Partitions: 2}
	if err := pgoutbox.Migrate(t.Context(), p, opts); err != nil {
		t.Fatal(err)
	}
	b, err := pgoutbox.New(t.Context(), p, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ids := appendN(t, b, p, "x", 3000, func(i int) string { return fmt.Sprint("k", i%11) })

	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	stopKill := make(chan struct{})
	var killed int
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-stopKill:
				return
			case <-time.After(20 * time.Millisecond):
			}
			if killed >= 25 {
				continue
			}
			var n int
			_ = base.QueryRow(ctx, "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = $1", app).Scan(&n)
			killed += n
		}
	})
	var mu sync.Mutex
	seen := map[string]bool{}
	err = drain(ctx, b, "relay", 500*time.Millisecond, func(got []string) {
		mu.Lock()
		defer mu.Unlock()
		for _, id := range got {
			seen[id] = true
		}
	})
	close(stopKill)
	wg.Wait()
	if err != nil {
		t.Fatalf("drain: %v", err)
	}
	if killed == 0 {
		t.Fatal("no backend connection was terminated; the test proved nothing")
	}
	for _, id := range ids {
		if !seen[id] {
			t.Errorf("entry %s was lost", id)
		}
	}
	t.Logf("terminated %d backend connections during the drain", killed)
}

func TestStaleLeaseHolderIsRejected(t *testing.T) {
	t.Parallel()
	for _, mode := range []pgx.QueryExecMode{extended, pgx.QueryExecModeSimpleProtocol} {
		b, p := newBackend(t, mode, pgoutbox.Options{})
		ctx := t.Context()
		appendN(t, b, p, "s", 3, func(int) string { return "k" })
		stale, err := b.AcquireLease(ctx, 0, "stale", 300*time.Millisecond)
		if err != nil {
			t.Fatal(err)
		}
		batch, err := b.FindPendingBatch(ctx, stale, 10)
		if err != nil || len(batch) != 3 {
			t.Fatalf("FindPendingBatch: %d entries, %v", len(batch), err)
		}
		time.Sleep(400 * time.Millisecond)
		fresh, err := b.AcquireLease(ctx, 0, "fresh", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if fresh.Version <= stale.Version {
			t.Fatalf("takeover version %d, want > %d", fresh.Version, stale.Version)
		}
		checks := map[string]error{
			"MarkSent":   b.MarkSent(ctx, stale, []string{"s000000"}),
			"MarkFailed": b.MarkFailed(ctx, stale, []outbox.Failure{{ID: "s000001", Error: "x", Park: true}}),
			"Release":    b.Release(ctx, stale, []string{"s000002"}),
		}
		_, checks["FindPendingBatch"] = b.FindPendingBatch(ctx, stale, 10)
		_, checks["RenewLease"] = b.RenewLease(ctx, stale, time.Minute)
		for op, err := range checks {
			if !errors.Is(err, outbox.ErrLeaseLost) {
				t.Errorf("stale %s: %v, want ErrLeaseLost", op, err)
			}
		}
		if err := b.ReleaseLease(ctx, stale); err != nil {
			t.Errorf("stale ReleaseLease: %v, want nil (no-op)", err)
		}
		got, err := b.FindPendingBatch(ctx, fresh, 10)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != 3 || got[0].Attempts != 0 || got[1].Attempts != 0 {
			t.Fatalf("the new holder sees %+v; want the 3 entries untouched by the stale holder", got)
		}
	}
}

func TestArchiveAndPurge(t *testing.T) {
	t.Parallel()
	b, p := newBackend(t, extended, pgoutbox.Options{Archive: true})
	ctx := t.Context()
	ids := appendN(t, b, p, "a", 7, func(int) string { return "" })
	l, err := b.AcquireLease(ctx, 0, "o", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.MarkSent(ctx, l, ids); err != nil {
		t.Fatal(err)
	}
	if err := b.MarkSent(ctx, l, ids); err != nil { // idempotent
		t.Fatal(err)
	}
	count := func(table string) int {
		var n int
		if err := p.QueryRow(ctx, "SELECT count(*) FROM "+pgx.Identifier{b.Options().Schema, table}.Sanitize()).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	if n, a := count("outbox"), count("outbox_archive"); n != 0 || a != 7 {
		t.Fatalf("after MarkSent: %d in the outbox, %d archived; want 0 and 7", n, a)
	}
	// An archived entry is sent, so appending its ID again appends it
	// again (the SPI: idempotency covers unsent entries); sending it again
	// keeps one archive row per ID, of the latest delivery.
	appendN(t, b, p, "a", 1, func(int) string { return "" })
	if n := count("outbox"); n != 1 {
		t.Fatalf("re-appending an archived ID inserted %d rows, want 1", n)
	}
	var sentBefore time.Time
	if err := p.QueryRow(ctx, "SELECT sent_at FROM "+pgx.Identifier{b.Options().Schema, "outbox_archive"}.Sanitize()+" WHERE id = $1", ids[0]).Scan(&sentBefore); err != nil {
		t.Fatal(err)
	}
	if err := b.MarkSent(ctx, l, ids[:1]); err != nil {
		t.Fatal(err)
	}
	var sentAfter time.Time
	if err := p.QueryRow(ctx, "SELECT sent_at FROM "+pgx.Identifier{b.Options().Schema, "outbox_archive"}.Sanitize()+" WHERE id = $1", ids[0]).Scan(&sentAfter); err != nil {
		t.Fatal(err)
	}
	if n, a := count("outbox"), count("outbox_archive"); n != 0 || a != 7 || !sentAfter.After(sentBefore) {
		t.Fatalf("after sending a re-appended ID: %d in the outbox, %d archived, sent_at %v then %v; want 0, 7 and the later delivery's time", n, a, sentBefore, sentAfter)
	}
	if n, err := b.PurgeArchive(ctx, time.Now().Add(-time.Hour), 2); err != nil || n != 0 {
		t.Fatalf("PurgeArchive of nothing old: %d, %v", n, err)
	}
	if n, err := b.PurgeArchive(ctx, time.Now().Add(time.Hour), 2); err != nil || n != 7 {
		t.Fatalf("PurgeArchive: deleted %d (%v), want 7", n, err)
	}
	if a := count("outbox_archive"); a != 0 {
		t.Fatalf("%d archived rows left after PurgeArchive", a)
	}
}

func TestNotificationsSurviveListenerTermination(t *testing.T) {
	t.Parallel()
	p := pool(t, extended)
	lc := p.Config().ConnConfig.Copy()
	app := "pgoutbox-listen-" + freshSchema(t, p)[len("pgoutbox_test_"):]
	lc.RuntimeParams["application_name"] = app
	b, _ := newBackend(t, extended, pgoutbox.Options{ListenConfig: lc})
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	ch, err := b.Notifications(ctx)
	if err != nil {
		t.Fatal(err)
	}
	waitWake := func(what string, want int) {
		t.Helper()
		select {
		case got, ok := <-ch:
			if !ok {
				t.Fatalf("%s: channel closed", what)
			}
			if got != want {
				t.Fatalf("%s: got %d, want %d", what, got, want)
			}
		case <-ctx.Done():
			t.Fatalf("%s: no notification", what)
		}
	}
	appendN(t, b, p, "n", 1, func(int) string { return "" })
	waitWake("after a commit", 0)
	var n int
	if err := p.QueryRow(ctx, "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = $1", app).Scan(&n); err != nil || n != 1 {
		t.Fatalf("terminating the listener: %d, %v", n, err)
	}
	waitWake("after reconnecting", outbox.AllPartitions)
	appendN(t, b, p, "m", 1, func(int) string { return "" })
	waitWake("after a commit following the reconnect", 0)
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	for range ch { // closed by Close
	}
}

func TestHeadersRoundTrip(t *testing.T) {
	t.Parallel()
	for _, h := range []map[string]string{nil, {}, {"a": "", "\x00": "\xff\x00", "ключ": "значение"}} {
		got, err := pgoutbox.DecodeHeaders(pgoutbox.EncodeHeaders(h))
		if err != nil {
			t.Fatal(err)
		}
		if (got == nil) != (h == nil) || len(got) != len(h) {
			t.Fatalf("round trip of %q gave %q", h, got)
		}
		for k, v := range h {
			if got[k] != v {
				t.Fatalf("round trip of %q gave %q", h, got)
			}
		}
	}
	if _, err := pgoutbox.DecodeHeaders([]byte{5, 'a'}); err == nil {
		t.Fatal("DecodeHeaders accepted a truncated value")
	}
}

// TestRequeueOrdersAsIfAppendedNow requeues two entries of a key in one
// call: they come after the entries of the key that were pending, in their
// original order among themselves, and before an entry appended later.
func TestRequeueOrdersAsIfAppendedNow(t *testing.T) {
	t.Parallel()
	for _, mode := range []pgx.QueryExecMode{extended, pgx.QueryExecModeSimpleProtocol} {
		b, p := newBackend(t, mode, pgoutbox.Options{})
		ctx := t.Context()
		appendN(t, b, p, "a", 4, func(int) string { return "k" })
		l, err := b.AcquireLease(ctx, 0, "o", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		batch, err := b.FindPendingBatch(ctx, l, 2)
		if err != nil || len(batch) != 2 {
			t.Fatalf("FindPendingBatch: %d entries, %v", len(batch), err)
		}
		if err := b.MarkFailed(ctx, l, []outbox.Failure{{ID: "a000000", Park: true}, {ID: "a000001", Park: true}}); err != nil {
			t.Fatal(err)
		}
		if n, err := b.Requeue(ctx, "a000001", "a000000"); err != nil || n != 2 {
			t.Fatalf("Requeue: %d, %v; want 2, nil", n, err)
		}
		appendN(t, b, p, "b", 1, func(int) string { return "k" })
		batch, err = b.FindPendingBatch(ctx, l, 10)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, e := range batch {
			got = append(got, e.ID)
		}
		want := []string{"a000002", "a000003", "a000000", "a000001", "b000000"}
		if !slices.Equal(got, want) {
			t.Fatalf("mode %v: fetch after requeueing a000001, a000000 = %v, want %v", mode, got, want)
		}
	}
}
