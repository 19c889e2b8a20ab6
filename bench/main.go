// Command bench is the benchmark harness of the outbox: it measures the
// Postgres and Redis backends (workloads W1-W6 of docs/benchmarks.md) side
// by side with River, Watermill SQL, asynq and the raw limits of the same
// servers, in one run, with the same payloads, and writes the tables.
//
// Usage:
//
//	cd bench && go run .          # full run: writes ../docs/benchmarks.md and results.json
//	cd bench && go run . -quick   # small N, one run each: checks the harness and the counts
//
// The servers come from OUTBOX_POSTGRES_URL and OUTBOX_REDIS_URL (defaults:
// postgres://postgres@127.0.0.1:5432/postgres and redis://127.0.0.1:6379).
// Postgres workloads use their own schemas (bench_*), dropped afterwards;
// Redis workloads use logical database -redis-db (default 15) and only
// their own key prefixes, deleted afterwards (never FLUSHDB).
//
// The broker workloads (nats, rabbitmq: issue 29's sinks against each
// broker's raw client) use OUTBOX_NATS_URL and OUTBOX_AMQP_URL (defaults:
// nats://127.0.0.1:4222, a server with JetStream, and
// amqp://guest:guest@127.0.0.1:5672/), each run in a stream, or an
// exchange and queue, of its own, deleted afterwards; a broker that cannot
// be reached has its workloads skipped, or fails the run under
// OUTBOX_REQUIRE_SERVICES=1.
//
// The inbox workloads (issue 31; -only inbox) measure the consuming half:
// a consumer reading records from an in-process kfake cluster applies an
// effect per record with the inbox (pginbox, mysqlinbox, redisinbox) and
// without it, on the same records and servers in the same round (MySQL's
// rows are skipped like the MySQL workloads when its server cannot be
// reached), and a kafkainbox consumer group of 4 on 8 partitions; each
// effect table is checked for every record exactly once, in key order.
//
// Issue 32 added three parts: raw/postgres also drains with the raw
// at-least-once loop (lock, publish, delete, commit in one transaction),
// which our Postgres drain is judged against; "postgres notify callers"
// (-only notify) measures 1-entry appends from 8, 32 and 128 callers and
// the p99 at half load for each way the Postgres backend notifies; and
// "W3 cpu50 point" (-only cpu50) measures our p99 and River's at the rate
// at which the raw appenders alone keep the machine about 50% busy.
//
// Every workload counts what was really delivered; a lost entry, an
// unexpected duplicate or a per-key order violation fails the run (exit
// status 1).
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"regexp"
	"time"
)

// Config holds the run's settings.
type Config struct {
	Quick     bool
	N         int           // entries per backlog and batched-append workload
	N1        int           // transactions of the 1-entry-per-transaction appends
	Runs      int           // repetitions per figure (median reported)
	BigBack   int           // W4 large backlog
	SmallBack int           // W4 small backlog
	LatencyN  int           // W3 entries per run (upper bound)
	LatencyD  time.Duration // W3 longest duration per run
	ProbeD    time.Duration // W3 window of one sustainable-rate probe
	ProbeBis  int           // W3 bisection steps of the sustainable-rate search
	PGURL     string
	RedisURL  string
	RedisDB   int
	Only      *regexp.Regexp
	Skip      *regexp.Regexp
	DocPath   string
	JSONPath  string
	CPUProf   string
}

func main() {
	var (
		cfg   Config
		only  = flag.String("only", "", "run only the systems/workloads whose name matches this regexp (e.g. 'river|raw'; 'W5' runs W5 of both our backends, 'postgres W5' or 'fleet' part of it)")
		skip  = flag.String("skip", "", "skip the systems/workloads whose name matches this regexp")
		out   = flag.String("out", "", "directory for benchmarks.md and results.json (default: ../docs and . in a full run, a temporary directory with -quick)")
		n     = flag.Int("n", 0, "entries per backlog and per batched-append workload (default 100000, 2000 with -quick)")
		n1    = flag.Int("n1", 0, "transactions of the 1-entry-per-transaction append workloads (default 20000, 1000 with -quick)")
		runs  = flag.Int("runs", 0, "runs per figure (default 3, 1 with -quick)")
		big   = flag.Int("big", 0, "W4's big backlog (default 1000000, 20000 with -quick)")
		rend  = flag.String("render", "", "rewrite the markdown report from this results.json (after editing analysis.md) and exit; measures nothing")
		mrg   = flag.String("merge", "", "put the figures of this results.json (of a run of some workloads: -only … -out DIR) into results.json in place of the same figures, rewrite the markdown report and exit; measures nothing")
		redDB = flag.Int("redis-db", 15, "Redis logical database for every Redis workload (only the harness's own keys are touched)")
	)
	flag.BoolVar(&cfg.Quick, "quick", false, "small N, one run each: check that the harness works and the counts are right (under two minutes)")
	flag.BoolVar(&verbose, "v", false, "log what our relays and backends log (debug level)")
	flag.StringVar(&cfg.CPUProf, "cpuprofile", "", "write a CPU profile of the whole run to this file")
	flag.Parse()

	cfg.PGURL = envOr("OUTBOX_POSTGRES_URL", "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable")
	cfg.RedisURL = envOr("OUTBOX_REDIS_URL", "redis://127.0.0.1:6379/0")
	cfg.RedisDB = *redDB
	if cfg.Quick {
		cfg.N, cfg.N1, cfg.Runs = 2000, 1000, 1
		cfg.BigBack, cfg.SmallBack = 20000, 2000
		cfg.LatencyN, cfg.LatencyD = 600, 2*time.Second
		cfg.ProbeD, cfg.ProbeBis = 600*time.Millisecond, 2
	} else {
		cfg.N, cfg.N1, cfg.Runs = 100000, 20000, 3
		cfg.BigBack, cfg.SmallBack = 1000000, 10000
		cfg.LatencyN, cfg.LatencyD = 100000, 10*time.Second
		cfg.ProbeD, cfg.ProbeBis = 2*time.Second, 3
	}
	if *n > 0 {
		cfg.N = *n
		cfg.N1 = min(cfg.N1, *n)
	}
	if *n1 > 0 {
		cfg.N1 = *n1
	}
	// The single-entry appends use the first N1 of the N prepared messages.
	cfg.N1 = min(cfg.N1, cfg.N)
	if *big > 0 {
		cfg.BigBack = *big
	}
	if *runs > 0 {
		cfg.Runs = *runs
	}
	if *only != "" {
		cfg.Only = regexp.MustCompile(*only)
	}
	if *skip != "" {
		cfg.Skip = regexp.MustCompile(*skip)
	}
	switch {
	case *out != "":
		cfg.DocPath = filepath.Join(*out, "benchmarks.md")
		cfg.JSONPath = filepath.Join(*out, "results.json")
	case cfg.Quick || cfg.Only != nil || cfg.Skip != nil || *n > 0 || *n1 > 0 || *runs > 0 || *big > 0:
		// Only a full, default run may replace the published report.
		dir := filepath.Join(os.TempDir(), "outbox-bench-partial")
		if cfg.Quick {
			dir = filepath.Join(os.TempDir(), "outbox-bench-quick")
		}
		cfg.DocPath = filepath.Join(dir, "benchmarks.md")
		cfg.JSONPath = filepath.Join(dir, "results.json")
	default:
		cfg.DocPath = filepath.Join("..", "docs", "benchmarks.md")
		cfg.JSONPath = "results.json"
	}

	if *mrg != "" {
		if err := merge(cfg, *mrg); err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			os.Exit(1)
		}
		fmt.Println("bench: wrote", cfg.JSONPath, "and", cfg.DocPath)
		return
	}
	if *rend != "" {
		if err := render(cfg, *rend); err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			os.Exit(1)
		}
		fmt.Println("bench: wrote", cfg.DocPath)
		return
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	os.Exit(run(ctx, cfg))
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

func run(ctx context.Context, cfg Config) int {
	start := time.Now()
	s, err := newSuite(ctx, cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		return 1
	}
	defer s.close()
	if cfg.CPUProf != "" {
		stopProf, err := startCPUProfile(cfg.CPUProf)
		if err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			return 1
		}
		defer stopProf()
	}
	s.logf("machine: %s, %d cores; Go %s; PostgreSQL %s; Redis %s", s.info.CPU, s.info.Cores, s.info.Go, s.info.Postgres, s.info.Redis)
	s.logf("N=%d N1=%d runs=%d quick=%v", cfg.N, cfg.N1, cfg.Runs, cfg.Quick)

	// Rounds: every workload runs once per round, so the runs of all
	// systems interleave and the machine's drift hits them alike.
	failed := map[string]bool{}
	for run := range cfg.Runs {
		s.run = run
		for _, w := range s.workloads() {
			if ctx.Err() != nil || failed[w.name] || !s.selectedWorkload(w) {
				continue
			}
			s.settle(ctx)
			t0 := time.Now()
			s.logf("== round %d/%d: %s", run+1, cfg.Runs, w.name)
			if err := w.fn(ctx); err != nil {
				s.fail("%s: %v", w.name, err)
				failed[w.name] = true
			}
			s.logf("   %s took %s", w.name, time.Since(t0).Round(100*time.Millisecond))
		}
		if err := s.writeReports(); err != nil {
			s.fail("writing reports: %v", err)
		}
	}
	s.info.Elapsed = time.Since(start).Round(time.Second).String()

	if err := s.writeReports(); err != nil {
		s.fail("writing reports: %v", err)
	}
	fmt.Println(s.markdownTables())
	s.logf("total %s; reports: %s, %s", time.Since(start).Round(time.Second), cfg.DocPath, cfg.JSONPath)
	if len(s.failures) > 0 {
		fmt.Fprintf(os.Stderr, "bench: FAILED, %d problem(s):\n", len(s.failures))
		for _, f := range s.failures {
			fmt.Fprintln(os.Stderr, "  -", f)
		}
		return 1
	}
	if ctx.Err() != nil {
		fmt.Fprintln(os.Stderr, "bench: interrupted")
		return 1
	}
	fmt.Println("bench: all counts right")
	return 0
}
