package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/outboxrelay/outbox/chaos/internal/broker"
)

// errFailed is returned when a check failed; the report said why.
var errFailed = errors.New("chaos: a check failed")

// config sizes a run. The short run (CI) runs every scenario briefly; the
// full run is long enough to count dozens of faults per scenario.
type config struct {
	short      bool
	parallel   int
	appenders  int           // appender processes per scenario
	keys       int           // keys per appender
	rate       int           // transactions per second per appender
	partitions int           // outbox partitions (and the topic's)
	batch      int           // relay --batch
	leaseTTL   time.Duration // relay --lease-ttl
	publish    time.Duration // relay --kafka-publish-timeout
	scale      float64       // multiplies each scenario's fault phase
	warmup     time.Duration // appending before the first fault
}

func defaultConfig(short bool) config {
	c := config{
		parallel:   2,
		appenders:  2,
		keys:       40,
		rate:       100,
		partitions: 8,
		batch:      50,
		// The Kafka sink's landing bound is the publish timeout plus 5s,
		// and the lease must exceed 1.5 times it (outbox relay checks).
		leaseTTL: 10 * time.Second,
		publish:  time.Second,
		scale:    1,
		warmup:   3 * time.Second,
	}
	if short {
		c.short = true
		c.parallel = 3
		c.rate = 60
	}
	return c
}

// harness holds what every scenario run shares.
type harness struct {
	cfg       config
	root      string // the repository
	work      string // this run's files
	outbox    string // the outbox CLI binary
	kfake     string // the broker binary
	self      string // this binary, run as `chaos appender`
	pgURL     string // the shared PostgreSQL
	redisURL  string // the shared Redis
	mysqlURL  string // the shared MySQL (MariaDB)
	keepFiles bool
}

func runHarness(ctx context.Context, args []string) error {
	f, err := parseHarnessFlags(args)
	if err != nil {
		return err
	}
	if f.list {
		for _, sc := range scenarios() {
			fmt.Printf("%-28s %s\n", sc.name, sc.title)
		}
		return nil
	}
	if len(f.picked) == 0 {
		return fmt.Errorf("-run %q matches no scenario; -list lists them", f.pattern)
	}

	// go-redis logs every failed dial of its pools; the harness kills and
	// restarts Redis servers on purpose and reports what matters itself.
	redis.SetLogger(quietRedis{})
	h, err := newHarness(f.cfg, f.work)
	if err != nil {
		return err
	}

	start := time.Now()
	fmt.Printf("chaos: building the relay and the broker into %s\n", h.work)
	if err := h.build(ctx); err != nil {
		return err
	}
	results := h.runAll(ctx, f.picked)
	return h.finish(results, start, f.report)
}

// harnessFlags is what the command line of a harness run asks for.
type harnessFlags struct {
	cfg     config
	pattern string      // -run
	picked  []*scenario // the scenarios -run matches
	report  string      // -report
	work    string      // -work
	list    bool        // -list
}

// parseHarnessFlags reads the harness's flags from args, applies them to
// the default config and picks the scenarios -run matches.
func parseHarnessFlags(args []string) (harnessFlags, error) {
	fs := flag.NewFlagSet("chaos", flag.ContinueOnError)
	short := fs.Bool("short", false, "run every scenario briefly (what CI runs)")
	pattern := fs.String("run", "", "run only the scenarios whose name matches this regular expression")
	report := fs.String("report", "", "write the Markdown report to this file (the full run: docs/reliability.md)")
	work := fs.String("work", "", "directory for the run's logs and histories (default: a new temporary directory, removed after a run that passed)")
	parallel := fs.Int("parallel", 0, "scenarios run at once (default 3 short, 2 full)")
	scale := fs.Float64("scale", 1, "multiply each scenario's fault phase by this")
	list := fs.Bool("list", false, "list the scenarios and exit")
	if err := fs.Parse(args); err != nil {
		return harnessFlags{}, err
	}
	if fs.NArg() > 0 {
		return harnessFlags{}, fmt.Errorf("unexpected arguments %q (flags only; see -h)", fs.Args())
	}
	cfg := defaultConfig(*short)
	if *parallel > 0 {
		cfg.parallel = *parallel
	}
	if *scale <= 0 {
		return harnessFlags{}, fmt.Errorf("-scale %v: give a positive factor", *scale)
	}
	cfg.scale = *scale
	picked, err := pickScenarios(*pattern)
	if err != nil {
		return harnessFlags{}, err
	}
	return harnessFlags{cfg: cfg, pattern: *pattern, picked: picked, report: *report, work: *work, list: *list}, nil
}

// pickScenarios returns the scenarios whose name matches the regular
// expression pattern, every scenario when pattern is empty.
func pickScenarios(pattern string) ([]*scenario, error) {
	var re *regexp.Regexp
	if pattern != "" {
		var err error
		if re, err = regexp.Compile(pattern); err != nil {
			return nil, fmt.Errorf("-run %q: %w", pattern, err)
		}
	}
	var picked []*scenario
	for _, sc := range scenarios() {
		if re == nil || re.MatchString(sc.name) {
			picked = append(picked, sc)
		}
	}
	return picked, nil
}

// newHarness sets up a run's harness: the repository, the work directory
// (work, or a new temporary one when it is empty), the shared servers'
// URLs and this binary's path.
func newHarness(cfg config, work string) (*harness, error) {
	h := &harness{cfg: cfg, keepFiles: work != ""}
	var err error
	if h.root, err = repoRoot(); err != nil {
		return nil, err
	}
	if work == "" {
		if h.work, err = os.MkdirTemp("", "outbox-chaos-"); err != nil {
			return nil, err
		}
	} else {
		h.work = work
		if err := os.MkdirAll(h.work, 0o755); err != nil {
			return nil, err
		}
	}
	// The private servers run as the postgres user, which must reach them.
	_ = os.Chmod(h.work, 0o755)
	h.pgURL = envOr("OUTBOX_POSTGRES_URL", "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable")
	h.redisURL = envOr("OUTBOX_REDIS_URL", "redis://127.0.0.1:6379/0")
	h.mysqlURL = envOr("OUTBOX_MYSQL_URL", "mysql://root@127.0.0.1:3306/")
	if h.self, err = os.Executable(); err != nil {
		return nil, err
	}
	return h, nil
}

// runAll runs the scenarios, cfg.parallel at a time, printing each one's
// summary as it ends, and returns their results in the order given. A
// scenario still waiting for its turn when ctx ends gets ctx's error.
func (h *harness) runAll(ctx context.Context, picked []*scenario) []*result {
	results := make([]*result, len(picked))
	sem := make(chan struct{}, h.cfg.parallel)
	var wg sync.WaitGroup
	for i, sc := range picked {
		wg.Add(1)
		go func() {
			defer wg.Done()
			select {
			case sem <- struct{}{}:
			case <-ctx.Done():
				results[i] = &result{sc: sc, err: ctx.Err()}
				return
			}
			defer func() { <-sem }()
			results[i] = h.runScenario(ctx, sc)
			fmt.Println(results[i].summary())
		}()
	}
	wg.Wait()
	return results
}

// finish prints the results' table, removes the work directory of a run
// that passed (unless -work named it), writes the report when report is
// set, and returns errFailed when a scenario failed.
func (h *harness) finish(results []*result, start time.Time, report string) error {
	failed := false
	for _, r := range results {
		if !r.passed() {
			failed = true
		}
	}
	fmt.Println()
	fmt.Print(markdownTable(results))
	fmt.Printf("\nchaos: %d scenarios in %s", len(results), time.Since(start).Round(time.Second))
	if failed || h.keepFiles {
		fmt.Printf("; logs and histories in %s\n", h.work)
	} else {
		fmt.Println()
		_ = os.RemoveAll(h.work)
	}
	if report != "" {
		if err := writeReport(report, h, results, time.Since(start)); err != nil {
			return err
		}
		fmt.Printf("chaos: wrote %s\n", report)
	}
	if failed {
		return errFailed
	}
	return nil
}

func (h *harness) build(ctx context.Context) error {
	h.outbox = filepath.Join(h.work, "outbox")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", h.outbox, "./cmd/outbox")
	cmd.Dir = h.root
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("building cmd/outbox: %v\n%s", err, out)
	}
	var err error
	h.kfake, err = broker.Build(ctx, h.root, h.work)
	return err
}

func repoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for d := dir; ; d = filepath.Dir(d) {
		if b, err := os.ReadFile(filepath.Join(d, "go.mod")); err == nil && strings.Contains(string(b), "module github.com/outboxrelay/outbox\n") {
			return d, nil
		}
		if filepath.Dir(d) == d {
			return "", fmt.Errorf("run chaos inside the outbox repository (no go.mod of github.com/outboxrelay/outbox above %s)", dir)
		}
	}
}

type quietRedis struct{}

func (quietRedis) Printf(context.Context, string, ...any) {}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}
