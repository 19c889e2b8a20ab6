package main

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	pgoutbox "github.com/outboxrelay/outbox/backends/postgres"
	"github.com/outboxrelay/outbox/internal/testenv"
)

// testPGSuite returns a Suite on the test server's PostgreSQL, or skips
// (fails under OUTBOX_REQUIRE_SERVICES=1) when there is none.
func testPGSuite(t *testing.T, ctx context.Context) *Suite {
	t.Helper()
	pool, err := pgxpool.New(ctx, testenv.PostgresURL())
	if err == nil {
		err = pool.Ping(ctx)
	}
	if err != nil {
		testenv.Unavailable(t, "PostgreSQL", "OUTBOX_POSTGRES_URL", err)
	}
	t.Cleanup(pool.Close)
	return &Suite{pool: pool, acc: map[string]*series{}, latRate: map[string]roundRate{}, keep: map[string]any{}}
}

// The at-least-once loop leaves a batch whose publish failed in the
// table (a claim-and-delete statement would have lost it), then drains
// every row exactly once and leaves the table empty.
func TestRawAtLeastOnceLoopKeepsAFailedBatch(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	s := testPGSuite(t, ctx)
	const schema = "bench_raw_test_claimtx"
	table := schema + ".entries"
	if _, err := s.pool.Exec(ctx, "DROP SCHEMA IF EXISTS "+schema+" CASCADE; CREATE SCHEMA "+schema+";"+rawOn(rawTableDDL, table)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = s.pool.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+schema+" CASCADE") })
	const n = 1234
	msgs := newMessages(n, 5)
	if _, err := s.fillRawPG(ctx, table, msgs); err != nil {
		t.Fatal(err)
	}

	crash := errors.New("the sink is down")
	var seen int
	k, err := s.rawPGClaimTx(ctx, table, 500, func(p [][]byte) error { seen = len(p); return crash })
	if !errors.Is(err, crash) || k != 0 {
		t.Fatalf("a failed publish: k = %d, err = %v; want 0 and the sink's error", k, err)
	}
	if seen != 500 {
		t.Fatalf("the sink saw %d rows, want a batch of 500", seen)
	}
	if err := s.checkRawRows(ctx, table, n); err != nil {
		t.Fatalf("after a failed publish: %v (the batch must stay)", err)
	}

	tr := newTracker(n)
	if _, err := s.rawPGDrainTx(ctx, table, n, tr); err != nil {
		t.Fatal(err)
	}
	if err := tr.counts_().check(false); err != nil {
		t.Error(err)
	}
	if err := s.checkRawRows(ctx, table, 0); err != nil {
		t.Error(err)
	}
	// Nothing is left: one more batch takes nothing and a drain fails.
	if _, err := s.rawPGDrainTx(ctx, table, 1, newTracker(1)); err == nil || !strings.Contains(err.Error(), "ran dry") {
		t.Errorf("draining an empty table: %v, want a count error", err)
	}
}

// Each notification setting appends every entry of every caller, on a
// caller pool of its own, and the settings set what they say.
func TestNotifyAppendsEveryEntryWithEachSetting(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	s := testPGSuite(t, ctx)
	// A schema of its own: another process of the harness (a bench run,
	// a soak) numbers its outboxes in bench_outbox from 1 too.
	const schema = "bench_outbox_test_notify"
	if _, err := s.pool.Exec(ctx, "DROP SCHEMA IF EXISTS "+schema+" CASCADE; CREATE SCHEMA "+schema); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = s.pool.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+schema+" CASCADE") })
	want := map[string]func(o pgoutbox.Options) bool{
		"default": func(o pgoutbox.Options) bool { return !o.NoNotify && o.NotifyInterval == 0 },
		"every":   func(o pgoutbox.Options) bool { return !o.NoNotify && o.NotifyInterval < 0 },
		"10ms":    func(o pgoutbox.Options) bool { return !o.NoNotify && o.NotifyInterval == 10*time.Millisecond },
		"50ms":    func(o pgoutbox.Options) bool { return !o.NoNotify && o.NotifyInterval == 50*time.Millisecond },
		"quiet":   func(o pgoutbox.Options) bool { return o.NoNotify },
	}
	if notifySettings[0].key != "default" || notifySettings[len(notifySettings)-1].key != "quiet" {
		t.Fatalf("the settings must run from the default to NoNotify: %q first, %q last", notifySettings[0].key, notifySettings[len(notifySettings)-1].key)
	}
	if len(notifySettings) != len(want) {
		t.Fatalf("%d settings, the test knows %d", len(notifySettings), len(want))
	}
	pool, conns, err := s.callerPool(ctx, 8)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	if conns != 8 {
		t.Errorf("a pool of %d connections for 8 callers", conns)
	}
	msgs := newMessages(300, 4)
	for _, st := range notifySettings {
		var o pgoutbox.Options
		if st.set != nil {
			st.set(&o)
		}
		if ok := want[st.key]; ok == nil || !ok(o) {
			t.Errorf("setting %q sets %+v", st.key, o)
		}
		// notifyAppendRun checks the pending count itself.
		own := st
		own.set = func(o *pgoutbox.Options) {
			if st.set != nil {
				st.set(o)
			}
			o.Schema = schema
		}
		v, err := s.notifyAppendRun(ctx, pool, own, 8, msgs)
		if err != nil || v <= 0 {
			t.Errorf("%s: %v entries/s, %v", st.key, v, err)
		}
	}
}

func TestSearchBusyFindsTheFiftyPercentRate(t *testing.T) {
	t.Parallel()
	linear := func(r float64) float64 { return 10 + r/1000 } // 50% at 40,000/s
	for _, c := range []struct {
		name      string
		busy      func(r float64) float64
		wantRate  float64
		wantProbe []float64
		wantErr   string
	}{
		{"DoublesThenBisectsIntoTheBand", linear, 40000, []float64{1000, 2000, 4000, 8000, 16000, 32000, 64000, 48000, 40000}, ""},
		{"StopsAtTheFirstProbeInTheBand", func(r float64) float64 { return r / 80 }, 4000, []float64{1000, 2000, 4000}, ""},
		{"BisectsBelowTheFirstRate", func(r float64) float64 { return 40 + r/50 }, 500, []float64{1000, 500}, ""},
		// A step from 20% to 90% between 4,000 and 4,100/s: no probe
		// lands in the band; the nearest is taken.
		{"TakesTheNearestWhenNoneLands", func(r float64) float64 {
			if r > 4050 {
				return 90
			}
			return 20
		}, 4000, []float64{1000, 2000, 4000, 8000, 6000, 5000, 4500, 4300}, ""},
		{"TakesTheLowestWhenEveryProbeIsOver", func(float64) float64 { return 100 }, 100, []float64{1000, 500, 300, 200, 100}, ""},
		{"FailsWithoutAReading", func(float64) float64 { return -1 }, 0, nil, "no CPU reading"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			got, probes, err := searchBusy(1000, 256000, 50, 5, 4, func(r float64) (float64, error) { return c.busy(r), nil })
			if c.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), c.wantErr) {
					t.Fatalf("err = %v, want %q", err, c.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.rate != c.wantRate {
				t.Errorf("rate = %v (busy %.1f), want %v", got.rate, got.busy, c.wantRate)
			}
			var rates []float64
			for _, p := range probes {
				rates = append(rates, p.rate)
			}
			if fmt.Sprint(rates) != fmt.Sprint(c.wantProbe) {
				t.Errorf("probed %v, want %v", rates, c.wantProbe)
			}
		})
	}
	boom := errors.New("boom")
	if _, _, err := searchBusy(1000, 256000, 50, 5, 4, func(float64) (float64, error) { return 0, boom }); !errors.Is(err, boom) {
		t.Errorf("a failing probe: %v", err)
	}
}

func TestIssue32RowsInTheTargetsTable(t *testing.T) {
	t.Parallel()
	s := &Suite{}
	one := func(key, sys, unit string, v float64) *Result {
		return &Result{Key: key, System: sys, Unit: unit, Runs: []float64{v}, Median: v}
	}
	s.results = []*Result{
		one("ours.pg.drain.noop", "outbox/postgres relay", "entries/s", 200000),
		one("raw.pg.claimdelete", "raw SQL claim-and-delete loop", "entries/s", 320000),
		one("raw.pg.claimtx", "raw at-least-once", "entries/s", 160000),
		one(notifyAppendKey("default", 32), "default", "entries/s", 7000),
		one(notifyAppendKey("quiet", 32), "quiet", "entries/s", 10000),
		one(notifyAppendKey("default", 8), "default", "entries/s", 7000),
		one(notifyAppendKey("quiet", 8), "quiet", "entries/s", 10000),
		one(notifyLatPrefix("default")+".p99", "default p99", "ms", 10),
		one(notifyLatPrefix("every")+".p99", "every p99", "ms", 15),
		one(notifyLatPrefix("quiet")+".p99", "quiet p99", "ms", 900),
		one("ours.pg.lat.cpu50.p99", "outbox/postgres p99", "ms", 4),
		one("ours.redis.lat.cpu50.p99", "outbox/redis p99", "ms", 12),
		one("river.lat.cpu50.p99", "River p99", "ms", 200),
	}
	table := s.markdownTables()
	for _, want := range []string{
		"no-op sink, against the raw loop with the same guarantee | 200.0k entries/s | raw at-least-once 160.0k entries/s | 1.25× |  | ≥ 0.8× | yes |",
		"no-op sink, against the raw loop that deletes on claim | 200.0k entries/s | raw SQL claim-and-delete loop 320.0k entries/s | 0.62× |  |  | — |",
		"(what the guarantee costs) | 160.0k entries/s | raw SQL claim-and-delete loop 320.0k entries/s | 0.50× |",
		"1 entry/tx, 32 callers: default notifications vs none (NoNotify) | 7.0k entries/s | quiet 10.0k entries/s | 0.70× |  | ≥ 0.8× | **no** |",
		"1 entry/tx, 8 callers: default notifications vs none (NoNotify) | 7.0k entries/s | quiet 10.0k entries/s | 0.70× |  |  | — |",
		"(NOTIFY in every transaction) vs the default | 15.0 ms | default p99 10.0 ms | 1.50× |  | ≤ 2× | yes |",
		"vs the default | 900 ms | default p99 10.0 ms | 90.00× |  | ≤ 2× | **no** |",
		"busy), wake-ups | 4.00 ms | — | — | 4.00 ms | ≤ 10 ms | yes |",
		"Redis commit-to-sink p99 at about 50% CPU (the rate at which the raw appenders alone keep the machine 50±5% busy), wake-ups | 12.0 ms | — | — | 12.00 ms | ≤ 10 ms | **no** |",
		"Postgres commit-to-sink p99 vs River's commit-to-work p99, same arrivals, at about 50% CPU (the rate at which the raw appenders alone keep the machine 50±5% busy) | 4.00 ms | River p99 200 ms | 0.02× |  | ≤ 0.05× | yes |",
		"Redis commit-to-sink p99 vs River's commit-to-work p99, same arrivals, at about 50% CPU (the rate at which the raw appenders alone keep the machine 50±5% busy) | 12.0 ms | River p99 200 ms | 0.06× |  | ≤ 0.05× | **no** |",
	} {
		if !strings.Contains(table, want) {
			t.Errorf("the targets table has no row with %q", want)
		}
	}
}

func TestIssue32WorkloadSelection(t *testing.T) {
	t.Parallel()
	names := map[string]bool{}
	for _, w := range (&Suite{}).workloads() {
		names[w.name] = true
	}
	for _, n := range []string{notifyWorkloadName, cpu50Name} {
		if !names[n] {
			t.Fatalf("no workload %q", n)
		}
	}
	for _, c := range []struct {
		only, skip string
		want       []string // of the two, the ones that run
	}{
		{"", "", []string{notifyWorkloadName, cpu50Name}},
		{"notify", "", []string{notifyWorkloadName}},
		{"cpu50", "", []string{cpu50Name}},
		{"W3", "", []string{cpu50Name}},
		{"W3", "cpu50", nil},
		{"^raw/postgres$", "", nil},
		{"river", "", nil},
	} {
		s := &Suite{}
		if c.only != "" {
			s.cfg.Only = regexp.MustCompile(c.only)
		}
		if c.skip != "" {
			s.cfg.Skip = regexp.MustCompile(c.skip)
		}
		var got []string
		for _, n := range []string{notifyWorkloadName, cpu50Name} {
			if s.selectedWorkload(workload{name: n}) {
				got = append(got, n)
			}
		}
		if fmt.Sprint(got) != fmt.Sprint(c.want) {
			t.Errorf("-only %q -skip %q: %v run, want %v", c.only, c.skip, got, c.want)
		}
	}
}
