package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/outboxrelay/outbox/chaos/internal/soak"
)

// The soak run (`chaos soak`, scripts/soak.sh): per backend a private
// server, `outbox migrate up`, three `outbox relay` processes, appenders
// at a steady rate, a kfake broker and a consumer in this process that
// measures commit-to-publish latency; faults at a steady pace; a sample
// every 10 seconds; then the trend, latency-window and history checks,
// and the negative controls (a leaking relay, a PostgreSQL without
// autovacuum) that the checks must catch. docs/soak.md says what it
// checks and why the bounds are what they are.

// soakConfig sizes a soak run.
type soakConfig struct {
	short        bool
	duration     time.Duration // load per backend
	backends     []string      // "postgres", "redis"
	rate         int           // entries/s over all appenders; 0: calibrate
	calibrate    time.Duration // the calibration's load, when rate is 0
	relays       int
	appenders    int
	keys         int // per appender
	partitions   int
	sample       time.Duration // between samples
	window       time.Duration // latency windows
	restartEvery time.Duration // a relay restarted (SIGTERM, start)
	restartAt    time.Duration // the first restart
	killEvery    time.Duration // a relay's store connections killed
	killAt       time.Duration // the first kill
	warmup       time.Duration // a restarted relay's samples left out of the fit
	retention    time.Duration // relay --archive-retention (Postgres)
	retInterval  time.Duration // relay --retention-interval
	naptime      time.Duration // autovacuum_naptime of the soak's PostgreSQL; 0: the server's default
	controls     bool
	controlDur   time.Duration // the negative controls' load
	controlRate  int           // the autovacuum-off control's rate
	latFactor    float64
	latFloor     time.Duration
	bounds       soak.Bounds
	out          string // where soak.md and images/ go; "" writes no report
	work         string
}

// defaultSoakConfig is the full run (60 minutes per backend) or, with
// short, CI's run (3 minutes, the backends and controls at once).
func defaultSoakConfig(short bool) soakConfig {
	c := soakConfig{
		short:        short,
		duration:     60 * time.Minute,
		backends:     []string{backendNamePostgres, backendNameRedis},
		calibrate:    40 * time.Second,
		relays:       3,
		appenders:    2,
		keys:         40,
		partitions:   8,
		sample:       10 * time.Second,
		window:       10 * time.Minute,
		restartEvery: 5 * time.Minute,
		restartAt:    5 * time.Minute,
		killEvery:    10 * time.Minute,
		killAt:       7*time.Minute + 30*time.Second,
		warmup:       2 * time.Minute,
		retention:    10 * time.Minute,
		retInterval:  time.Minute,
		controls:     true,
		controlDur:   3 * time.Minute,
		controlRate:  200,
		latFactor:    2,
		bounds:       soak.DefaultBounds(),
	}
	if short {
		c.duration = 3 * time.Minute
		c.rate = 100
		c.window = time.Minute
		// CI's short run shares a loaded machine: p99s of a few
		// milliseconds over one-minute windows differ by one scheduler
		// delay. The full run keeps the plain 2x rule.
		c.latFloor = 10 * time.Millisecond
		// Once each: the restart early enough that the new relay is
		// past its warm-up when the fitted half begins.
		c.restartEvery, c.restartAt = time.Hour, 20*time.Second
		c.killEvery, c.killAt = time.Hour, 130*time.Second
		c.warmup = 65 * time.Second
		c.retention = time.Minute
		c.retInterval = 10 * time.Second
		// A 90-second fit sees several vacuums only if autovacuum looks
		// every few seconds; the full run keeps the default (1 min).
		c.naptime = 10 * time.Second
	}
	return c
}

const (
	backendNamePostgres = "postgres"
	backendNameRedis    = "redis"
)

// parseSoakFlags reads `chaos soak`'s flags.
func parseSoakFlags(args []string) (soakConfig, error) {
	fs := flag.NewFlagSet("chaos soak", flag.ContinueOnError)
	short := fs.Bool("short", false, "CI's run: 3 minutes, Postgres, Redis and the negative controls at once, a fixed rate")
	duration := fs.Duration("duration", 0, "load per backend (default 60m, 3m with -short)")
	backend := fs.String("backend", "", "postgres, redis or both comma-separated (default both)")
	rate := fs.Int("rate", -1, "entries/s over all appenders (default: half the rate a calibration measures; 100 with -short)")
	out := fs.String("out", "", "write soak.md and images/soak-*.png into this directory (default docs in the full run, none with -short)")
	work := fs.String("work", "", "directory for the run's logs, histories and samples (default: a new temporary directory, kept)")
	noControls := fs.Bool("no-controls", false, "skip the negative controls (for trying the harness only: a run without them proves nothing)")
	latFloor := fs.Duration("latency-floor", 0, "a window's p99 passes when within the first window's plus this, even over twice it (default 0: the plain 2x rule; 10ms with -short)")
	if err := fs.Parse(args); err != nil {
		return soakConfig{}, err
	}
	if fs.NArg() > 0 {
		return soakConfig{}, fmt.Errorf("chaos soak: unexpected arguments %q (flags only; see -h)", fs.Args())
	}
	c := defaultSoakConfig(*short)
	if *duration < 0 || (*duration > 0 && *duration < time.Minute) {
		return c, fmt.Errorf("chaos soak: -duration %v: give at least 1m (the trend is fitted over the last half)", *duration)
	}
	if *duration > 0 {
		c.duration = *duration
		// Shorter than three latency windows: windows of a third of
		// the run.
		if c.duration < 3*c.window {
			c.window = max(time.Minute, (c.duration / 3).Round(time.Minute))
		}
		// A full run shorter than the fault schedule: two restarts and
		// a kill within it, the first restart past its warm-up before
		// the fitted half.
		if !c.short && c.duration < 15*time.Minute {
			c.restartAt, c.restartEvery = c.duration/8, c.duration/2
			c.killAt, c.killEvery = 2*c.duration/3, c.duration
			c.warmup = min(c.warmup, c.duration/3)
		}
	}
	if *backend != "" {
		c.backends = nil
		for b := range strings.SplitSeq(*backend, ",") {
			b = strings.TrimSpace(b)
			if b != backendNamePostgres && b != backendNameRedis {
				return c, fmt.Errorf("chaos soak: -backend %q: use postgres, redis or postgres,redis", b)
			}
			if !slices.Contains(c.backends, b) {
				c.backends = append(c.backends, b)
			}
		}
	}
	if *rate == 0 || *rate < -1 {
		return c, fmt.Errorf("chaos soak: -rate %d: give a positive rate in entries/s, or leave it out", *rate)
	}
	if *rate > 0 {
		c.rate = *rate
	}
	if *latFloor > 0 {
		c.latFloor = *latFloor
	}
	c.controls = !*noControls
	c.out = *out
	if c.out == "" && !c.short {
		c.out = "docs"
	}
	c.work = *work
	return c, nil
}

// runSoak is `chaos soak`.
func runSoak(ctx context.Context, args []string) error {
	cfg, err := parseSoakFlags(args)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	redis.SetLogger(quietRedis{})
	h, err := newHarness(defaultConfig(cfg.short), cfg.work)
	if err != nil {
		return err
	}
	if cfg.out != "" && !filepath.IsAbs(cfg.out) {
		wd, _ := os.Getwd()
		cfg.out = filepath.Join(wd, cfg.out)
	}
	start := time.Now()
	fmt.Printf("chaos soak: building the relay and the broker into %s\n", h.work)
	if err := h.build(ctx); err != nil {
		return err
	}
	feat := relayFeatures(ctx, h.outbox)
	fmt.Printf("chaos soak: outbox relay has %s\n", feat)

	specs := soakSpecs(cfg)
	var results []*soakResult
	if cfg.short {
		results = runSpecs(ctx, h, cfg, feat, specs) // all at once
	} else {
		// The controls first, together; then each backend alone, so
		// that its rate and latencies are its own.
		var controls, mains []soakSpec
		for _, s := range specs {
			if s.control != "" {
				controls = append(controls, s)
			} else {
				mains = append(mains, s)
			}
		}
		results = runSpecs(ctx, h, cfg, feat, controls)
		for _, s := range mains {
			results = append(results, runSpecs(ctx, h, cfg, feat, []soakSpec{s})...)
		}
	}
	return finishSoak(cfg, h, feat, results, time.Since(start))
}

// runSpecs runs specs at once and returns their results in order.
func runSpecs(ctx context.Context, h *harness, cfg soakConfig, feat relayFeat, specs []soakSpec) []*soakResult {
	results := make([]*soakResult, len(specs))
	var wg sync.WaitGroup
	for i, s := range specs {
		wg.Go(func() {
			results[i] = runSoakSpec(ctx, h, cfg, feat, s)
			fmt.Println(results[i].summary())
		})
	}
	wg.Wait()
	return results
}

// finishSoak prints every verdict, writes the report when cfg.out is
// set, and returns errFailed when a check failed or a control passed.
func finishSoak(cfg soakConfig, h *harness, feat relayFeat, results []*soakResult, elapsed time.Duration) error {
	failed := false
	fmt.Println()
	for _, r := range results {
		fmt.Print(r.details())
		if !r.passed() {
			failed = true
		}
	}
	fmt.Printf("\nchaos soak: %d runs in %s; logs, histories and samples in %s\n", len(results), elapsed.Round(time.Second), h.work)
	if cfg.out != "" {
		path, err := writeSoakReport(cfg, feat, results, elapsed)
		if err != nil {
			return err
		}
		fmt.Printf("chaos soak: wrote %s\n", path)
	}
	if failed {
		fmt.Println("chaos soak: FAILED")
		return errFailed
	}
	fmt.Println("chaos soak: passed")
	return nil
}
