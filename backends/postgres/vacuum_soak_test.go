package pgoutbox_test

import (
	"context"
	"encoding/csv"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxrelay/outbox"
	pgoutbox "github.com/outboxrelay/outbox/backends/postgres"
)

// TestAutovacuumSoak is a measurement, not a test of behaviour: run by
// hand (never in CI) against a PostgreSQL with autovacuum on, it keeps an
// outbox under steady load (appends at a fixed rate, drained by three
// relays in this process into a sink that drops what it gets) and samples
// the outbox table every 10 seconds: dead and live rows, the size of the
// table, of its indexes and of its TOAST, and the vacuum counts. See
// docs/postgres.md, "Autovacuum and the outbox table", for the command
// and the numbers.
//
//	scripts/pg-private.sh start
//	OUTBOX_PG_VACUUM_SOAK=1 OUTBOX_PG_VACUUM_URL=$(scripts/pg-private.sh url) \
//	  go test -run TestAutovacuumSoak -timeout 60m -v ./backends/postgres/
//
// Environment: OUTBOX_PG_VACUUM_URL (required; never the shared server's
// URL by default, since that one runs with autovacuum = off),
// OUTBOX_PG_VACUUM_DURATION (default 10m), OUTBOX_PG_VACUUM_RATE
// (entries/s, default 1000), OUTBOX_PG_VACUUM_VERSION (the migration to
// stop at, default the latest: 7 measures the table settings of migration
// 001 alone), OUTBOX_PG_VACUUM_OUT (a CSV file for the samples, default
// none: they are logged).
func TestAutovacuumSoak(t *testing.T) {
	if os.Getenv("OUTBOX_PG_VACUUM_SOAK") != "1" {
		t.Skip("a measurement run by hand: set OUTBOX_PG_VACUUM_SOAK=1 and OUTBOX_PG_VACUUM_URL (see docs/postgres.md, \"Autovacuum and the outbox table\")")
	}
	url := os.Getenv("OUTBOX_PG_VACUUM_URL")
	if url == "" {
		t.Fatal("OUTBOX_PG_VACUUM_URL is empty: start a private server with autovacuum on (scripts/pg-private.sh start) and set the variable to the URL it prints")
	}
	duration := envDuration(t, "OUTBOX_PG_VACUUM_DURATION", 10*time.Minute)
	rate := envInt(t, "OUTBOX_PG_VACUUM_RATE", 1000)
	version := envInt(t, "OUTBOX_PG_VACUUM_VERSION", pgoutbox.LatestVersion())

	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatalf("OUTBOX_PG_VACUUM_URL: %v", err)
	}
	cfg.MaxConns = 50
	p, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close) // after freshSchema's cleanup, which needs it
	var autovacuum string
	if err := p.QueryRow(ctx, "SHOW autovacuum").Scan(&autovacuum); err != nil {
		t.Fatal(err)
	}
	opts := pgoutbox.Options{Schema: freshSchema(t, p), Partitions: 8}
	if err := pgoutbox.MigrateTo(ctx, p, opts, version); err != nil {
		t.Fatal(err)
	}
	var reloptions string
	if err := p.QueryRow(ctx, "SELECT coalesce(array_to_string(reloptions, ', '), '') FROM pg_class WHERE oid = to_regclass($1)",
		pgx.Identifier{opts.Schema, "outbox"}.Sanitize()).Scan(&reloptions); err != nil {
		t.Fatal(err)
	}
	t.Logf("autovacuum = %s; migration %03d; outbox reloptions: %s; %d entries/s for %v, 3 relays", autovacuum, version, reloptions, rate, duration)
	b, err := pgoutbox.New(ctx, p, pgoutbox.Options{Schema: opts.Schema})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()

	var published atomic.Int64
	sink := outbox.SinkFunc(func(context.Context, outbox.Entry) error { published.Add(1); return nil })
	for i := range 3 {
		r, err := outbox.NewRelay(b, sink, outbox.RelayOptions{Owner: "soak-" + strconv.Itoa(i)})
		if err != nil {
			t.Fatal(err)
		}
		if err := r.Start(ctx); err != nil {
			t.Fatal(err)
		}
		defer func() { _ = r.Stop(context.Background()) }()
	}
	var appended, failed atomic.Int64
	var wg sync.WaitGroup
	loadCtx, stopLoad := context.WithCancel(ctx)
	defer stopLoad()
	// Each appender commits perTx entries per transaction, one commit (and
	// WAL flush) at a time: one entry per transaction reached only about
	// 400/s on the busy 2-core machine of the first runs.
	const appenders, perTx = 24, 5
	for range appenders {
		wg.Go(func() {
			appendAtRate(loadCtx, p, b, perTx, time.Duration(appenders*perTx)*time.Second/time.Duration(rate), &appended, &failed)
		})
	}

	var out *csv.Writer
	if path := os.Getenv("OUTBOX_PG_VACUUM_OUT"); path != "" {
		f, err := os.Create(path)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		out = csv.NewWriter(f)
		defer out.Flush()
	}
	header := []string{"t_s", "appended", "published", "live_rows", "dead_rows", "table_bytes", "index_bytes", "toast_bytes", "total_bytes", "vacuums", "autovacuums", "health_ms"}
	if out != nil {
		_ = out.Write(header)
	}
	t.Log(header)
	start := time.Now()
	tick := time.NewTicker(10 * time.Second)
	defer tick.Stop()
	for done := false; !done; {
		select {
		case <-ctx.Done():
			t.Fatal(ctx.Err())
		case <-tick.C:
		}
		done = time.Since(start) >= duration
		rec, err := soakSample(ctx, p, b, opts.Schema)
		if err != nil {
			t.Fatal(err)
		}
		rec = append([]string{strconv.Itoa(int(time.Since(start).Round(time.Second).Seconds())),
			strconv.FormatInt(appended.Load(), 10), strconv.FormatInt(published.Load(), 10)}, rec...)
		if out != nil {
			_ = out.Write(rec)
			out.Flush()
		}
		t.Log(rec)
	}
	stopLoad()
	wg.Wait()
	if n := failed.Load(); n > 0 {
		t.Errorf("%d appends failed", n)
	}
}

// appendAtRate appends perTx entries in one transaction every interval
// until ctx ends, counting the entries that committed and those that
// failed.
func appendAtRate(ctx context.Context, p *pgxpool.Pool, b *pgoutbox.Backend, perTx int, interval time.Duration, appended, failed *atomic.Int64) {
	payload := make([]byte, 200)
	entries := make([]outbox.Entry, perTx)
	next := time.Now()
	for ctx.Err() == nil {
		next = next.Add(interval)
		if d := time.Until(next); d > 0 {
			select {
			case <-ctx.Done():
				return
			case <-time.After(d):
			}
		}
		for i := range entries {
			entries[i] = outbox.Entry{Topic: "soak", Key: "k" + strconv.Itoa(rand.IntN(1000)), Payload: payload}
		}
		err := pgx.BeginFunc(ctx, p, func(tx pgx.Tx) error {
			return b.AppendInTx(ctx, tx, entries...)
		})
		switch {
		case err == nil:
			appended.Add(int64(perTx))
		case ctx.Err() == nil:
			failed.Add(int64(perTx))
		}
	}
}

// soakSample reads the outbox table's figures, and times one Health call.
func soakSample(ctx context.Context, p *pgxpool.Pool, b *pgoutbox.Backend, schema string) ([]string, error) {
	var live, dead, table, index, toast, total, vac, autovac int64
	err := p.QueryRow(ctx, `SELECT n_live_tup, n_dead_tup, pg_relation_size(relid), pg_indexes_size(relid),
       pg_total_relation_size(relid) - pg_relation_size(relid) - pg_indexes_size(relid), pg_total_relation_size(relid),
       vacuum_count, autovacuum_count
FROM pg_stat_user_tables WHERE relid = to_regclass($1)`, pgx.Identifier{schema, "outbox"}.Sanitize()).
		Scan(&live, &dead, &table, &index, &toast, &total, &vac, &autovac)
	if err != nil {
		return nil, err
	}
	t0 := time.Now()
	if _, err := b.Health(ctx); err != nil {
		return nil, err
	}
	ms := time.Since(t0).Seconds() * 1000
	s := func(n int64) string { return strconv.FormatInt(n, 10) }
	return []string{s(live), s(dead), s(table), s(index), s(toast), s(total), s(vac), s(autovac), fmt.Sprintf("%.1f", ms)}, nil
}

func envDuration(t *testing.T, name string, def time.Duration) time.Duration {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		t.Fatalf("%s=%q: want a positive duration such as 10m", name, v)
	}
	return d
}

func envInt(t *testing.T, name string, def int) int {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n <= 0 {
		t.Fatalf("%s=%q: want a positive integer", name, v)
	}
	return n
}
