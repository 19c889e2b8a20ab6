package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/outboxrelay/outbox/chaos/history"
	"github.com/outboxrelay/outbox/chaos/internal/soak"
)

// soakResult is a spec's run and its verdicts.
type soakResult struct {
	spec     soakSpec
	dir      string
	err      error // the run could not run to its end
	skipped  string
	rate     int     // entries/s asked
	measured float64 // the calibration's sustainable rate, 0 without one
	achieved float64 // entries/s the consumer received during the load
	samples  []soak.Sample
	bounds   soak.Bounds
	trends   []soak.TrendResult
	latency  soak.LatencyResult
	history  *history.Report
	warned   bool // a relay logged the autovacuum-off warning
	failures []string
	events   []string
	elapsed  time.Duration
}

// passed reports whether the run's verdict is good: a backend's run with
// every check passing, or a control whose defect the checks caught.
func (r *soakResult) passed() bool {
	return r.skipped != "" || (r.err == nil && len(r.failures) == 0)
}

// summary is one line for the console as the run ends.
func (r *soakResult) summary() string {
	switch {
	case r.skipped != "":
		return fmt.Sprintf("SKIP %-24s %s", r.spec.name, r.skipped)
	case r.err != nil:
		return fmt.Sprintf("FAIL %-24s %v", r.spec.name, r.err)
	case len(r.failures) > 0:
		return fmt.Sprintf("FAIL %-24s %s", r.spec.name, strings.Join(r.failures, "; "))
	}
	return fmt.Sprintf("ok   %-24s %d samples at %d entries/s", r.spec.name, len(r.samples), r.rate)
}

// details prints every verdict of the run.
func (r *soakResult) details() string {
	var b strings.Builder
	fmt.Fprintf(&b, "== %s (%s, %v of load, %d entries/s asked, %.0f received/s)\n", r.spec.name, r.dir, r.spec.duration, r.rate, r.achieved)
	if r.err != nil {
		fmt.Fprintf(&b, "   error: %v\n", r.err)
	}
	for _, t := range r.trends {
		fmt.Fprintf(&b, "   trend %s\n", t)
	}
	if len(r.latency.Windows) > 0 {
		fmt.Fprintf(&b, "   latency: %s\n", r.latency)
	}
	if r.history != nil {
		fmt.Fprintf(&b, "   history: appended %d, delivered %d, lost %d, order violations %d, duplicates %d, unexpected %d\n",
			r.history.Appended, r.history.Delivered, len(r.history.Lost), len(r.history.OrderViolations), r.history.Duplicates, len(r.history.Unexpected))
	}
	for _, f := range r.failures {
		fmt.Fprintf(&b, "   FAILED: %s\n", f)
	}
	return b.String()
}

// runSoakSpec runs one spec from setup to verdict and never panics out;
// its processes and servers are gone when it returns.
func runSoakSpec(ctx context.Context, h *harness, cfg soakConfig, feat relayFeat, spec soakSpec) (res *soakResult) {
	started := time.Now()
	r := &soakRun{h: h, cfg: cfg, feat: feat, spec: spec, id: spec.name + "-" + randHex(2)}
	r.dir = filepath.Join(h.work, "soak-"+r.id)
	res = &soakResult{spec: spec, dir: r.dir, rate: spec.rate}
	defer func() {
		for i := len(r.cleanup) - 1; i >= 0; i-- {
			r.cleanup[i]()
		}
		res.elapsed = time.Since(started)
		r.mu.Lock()
		res.events = r.events
		r.mu.Unlock()
		if r.log != nil {
			_ = r.log.Close()
		}
	}()
	if err := os.MkdirAll(r.dir, 0o755); err != nil {
		res.err = err
		return res
	}
	var err error
	if r.log, err = os.Create(filepath.Join(r.dir, "soak.log")); err != nil {
		res.err = err
		return res
	}
	err = r.execute(ctx, res)
	var missing *missingError
	if errors.As(err, &missing) && os.Getenv("OUTBOX_REQUIRE_SERVICES") != "1" {
		res.skipped = missing.Error()
		return res
	}
	res.err = err
	if err == nil {
		r.verdict(res)
	}
	if werr := r.writeSamples(res); werr != nil && res.err == nil {
		res.err = werr
	}
	return res
}

// execute sets up, calibrates (when the spec has no rate), runs the load
// with its samples and faults, drains and checks the history.
func (r *soakRun) execute(ctx context.Context, res *soakResult) error {
	if err := r.setup(ctx); err != nil {
		return fmt.Errorf("setup: %w", err)
	}
	var err error
	if r.faults, err = history.Create(filepath.Join(r.dir, "faults.jsonl")); err != nil {
		return err
	}
	cctx, stopConsumer := context.WithCancel(ctx)
	consumed := make(chan struct{})
	go func() { defer close(consumed); _ = r.consume(cctx) }()
	r.cleanup = append(r.cleanup, func() { stopConsumer(); <-consumed })
	for i := range r.spec.relays {
		if err := r.startRelay(i); err != nil {
			return err
		}
	}
	r.cleanup = append(r.cleanup, r.stopRelays)
	r.cleanup = append(r.cleanup, r.stopAppenders)
	if res.rate == 0 {
		if res.rate, err = r.calibrate(ctx, res); err != nil {
			return fmt.Errorf("calibration: %w", err)
		}
	}
	if err := r.load(ctx, res); err != nil {
		return err
	}
	r.stopAppenders()
	if err := r.checkAlive(); err != nil {
		return err
	}
	if err := r.waitDrained(ctx, 3*time.Minute); err != nil {
		return err
	}
	r.stopRelays()
	if err := r.faults.Close(); err != nil {
		return err
	}
	if r.spec.control == "" {
		if res.history, err = r.checkHistory(ctx); err != nil {
			return fmt.Errorf("history: %w", err)
		}
	}
	res.warned = r.loggedWarning("autovacuum-off")
	return nil
}

// calibrate measures the sustainable rate of this setup as the benchmark
// does (the highest rate whose backlog stays flat): appenders as fast as
// they go for cfg.calibrate with the relays running, the rate counted at
// the consumer over the last two thirds of it (what the slower of the
// appenders and the relays gets through), then a drain. It returns half
// of the measured rate.
func (r *soakRun) calibrate(ctx context.Context, res *soakResult) (int, error) {
	if err := r.startAppenders("cal", r.cfg.appenders, 0); err != nil {
		return 0, err
	}
	third := r.cfg.calibrate / 3
	if err := sleep(ctx, third); err != nil {
		return 0, err
	}
	n0, t0 := r.delivered.Load(), time.Now()
	if err := sleep(ctx, 2*third); err != nil {
		return 0, err
	}
	n1, t1 := r.delivered.Load(), time.Now()
	r.stopAppenders()
	if err := r.checkAlive(); err != nil {
		return 0, err
	}
	res.measured = float64(n1-n0) / t1.Sub(t0).Seconds()
	r.event("calibration: %.0f entries/s received over %v with the appenders unthrottled; the soak runs at half", res.measured, t1.Sub(t0).Round(time.Second))
	if err := r.waitDrained(ctx, 3*time.Minute); err != nil {
		return 0, err
	}
	if res.measured < 2 {
		return 0, fmt.Errorf("only %.1f entries/s got through", res.measured)
	}
	return int(res.measured / 2), nil
}

// load runs the appenders at res.rate for the spec's duration, takes a
// sample every cfg.sample and injects the faults on schedule.
func (r *soakRun) load(ctx context.Context, res *soakResult) error {
	start := time.Now()
	r.mu.Lock()
	r.lat = soak.NewLatencies(start, r.cfg.window)
	r.mu.Unlock()
	appenders := r.cfg.appenders
	if r.spec.control != "" {
		appenders = 1
	}
	if err := r.startAppenders("app", appenders, res.rate); err != nil {
		return err
	}
	r.event("load: %d entries/s from %d appenders for %v", res.rate, appenders, r.spec.duration)
	n0 := r.delivered.Load()
	end := start.Add(r.spec.duration)
	nextRestart, nextKill := start.Add(r.cfg.restartAt), start.Add(r.cfg.killAt)
	restarts, kills := 0, 0
	for tick := start.Add(r.cfg.sample); !tick.After(end); tick = tick.Add(r.cfg.sample) {
		if err := sleep(ctx, time.Until(tick)); err != nil {
			return err
		}
		if err := r.checkAlive(); err != nil {
			return err
		}
		s := r.takeSample(ctx, start)
		r.mu.Lock()
		res.samples = append(res.samples, s)
		r.mu.Unlock()
		if !r.spec.faults {
			continue
		}
		if now := time.Now(); !now.Before(nextRestart) && now.Before(end) {
			if err := r.restartRelay(restarts % r.spec.relays); err != nil {
				return fmt.Errorf("restarting a relay: %w", err)
			}
			restarts++
			nextRestart = nextRestart.Add(r.cfg.restartEvery)
		}
		if now := time.Now(); !now.Before(nextKill) && now.Before(end) {
			fctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			err := r.killConnections(fctx, (kills+1)%r.spec.relays)
			cancel()
			if err != nil {
				return fmt.Errorf("killing a relay's connections: %w", err)
			}
			kills++
			nextKill = nextKill.Add(r.cfg.killEvery)
		}
	}
	res.achieved = float64(r.delivered.Load()-n0) / time.Since(start).Seconds()
	return nil
}

// loggedWarning reports whether a relay logged a WARN line (JSON) with an
// attribute whose value is code: a health warning's code, as the relay
// logs it (a substring would also match the run's own name in a URL).
func (r *soakRun) loggedWarning(code string) bool {
	files, _ := filepath.Glob(filepath.Join(r.dir, "relay-*.log"))
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		for line := range strings.SplitSeq(string(b), "\n") {
			if warnsWith(line, code) {
				return true
			}
		}
	}
	return false
}

// warnsWith reports whether line is a JSON log line at WARN with an
// attribute whose value is code.
func warnsWith(line, code string) bool {
	if !strings.Contains(line, code) {
		return false
	}
	var m map[string]any
	if json.Unmarshal([]byte(line), &m) != nil || m["level"] != "WARN" {
		return false
	}
	for _, v := range m {
		if v == code {
			return true
		}
	}
	return false
}

// verdict runs the checks on a finished run.
func (r *soakRun) verdict(res *soakResult) {
	cfg := r.cfg
	res.bounds = r.bounds(res)
	res.trends = soak.CheckTrends(res.samples, r.spec.duration, cfg.warmup, res.bounds)
	switch r.spec.control {
	case controlLeak:
		if !soak.FlaggedAny(res.trends, soak.SeriesRSS+":relay-0") {
			res.failures = append(res.failures, "negative control: the leaking relay's RSS was not flagged by the trend check: "+trendOf(res.trends, soak.SeriesRSS+":relay-0"))
		}
		return
	case controlAutovacuum:
		if !res.warned {
			res.failures = append(res.failures, "negative control: no relay logged the autovacuum-off warning (relay-*.log in "+r.dir+")")
		}
		if !soak.FlaggedAny(res.trends, soak.SeriesDeadTuples+":outbox", soak.SeriesTableBytes+":outbox") {
			res.failures = append(res.failures, "negative control: with autovacuum off, neither the outbox table's dead tuples nor its size was flagged: "+
				trendOf(res.trends, soak.SeriesDeadTuples+":outbox")+"; "+trendOf(res.trends, soak.SeriesTableBytes+":outbox"))
		}
		return
	}
	for _, t := range soak.Flagged(res.trends) {
		res.failures = append(res.failures, "trend: "+t.String())
	}
	windows := int(r.spec.duration / cfg.window)
	res.latency = soak.CheckLatency(r.latencies().Windows(max(windows, 1)), cfg.latFactor, cfg.latFloor)
	if !res.latency.OK() {
		res.failures = append(res.failures, "latency: "+res.latency.String())
	}
	if h := res.history; h != nil && (len(h.Lost) > 0 || len(h.OrderViolations) > 0 || len(h.Unexpected) > 0) {
		res.failures = append(res.failures, fmt.Sprintf("history: %d lost, %d order violations, %d never appended (see %s)",
			len(h.Lost), len(h.OrderViolations), len(h.Unexpected), r.dir))
	}
}

// bounds are cfg.bounds with the dead tuples' floor raised, where
// autovacuum runs, to the height of its sawtooth: three times the rate
// received times autovacuum_naptime (the default 1 min when the run
// keeps the server's), the rows a table may delete between two looks of
// the launcher and the vacuum that follows.
func (r *soakRun) bounds(res *soakResult) soak.Bounds {
	b := maps.Clone(r.cfg.bounds)
	if r.spec.backend != backendNamePostgres || r.spec.control == controlAutovacuum {
		return b
	}
	nap := r.cfg.naptime
	if nap == 0 {
		nap = time.Minute
	}
	d := b[soak.SeriesDeadTuples]
	d.Abs = max(d.Abs, 3*res.achieved*nap.Seconds())
	b[soak.SeriesDeadTuples] = d
	return b
}

func trendOf(rs []soak.TrendResult, series string) string {
	for _, t := range rs {
		if t.Series == series {
			return t.String()
		}
	}
	return series + ": no samples"
}

// writeSamples writes samples.csv and result.json into the run's
// directory.
func (r *soakRun) writeSamples(res *soakResult) error {
	if err := soak.WriteCSV(filepath.Join(r.dir, "samples.csv"), res.samples); err != nil {
		return err
	}
	errText := ""
	if res.err != nil {
		errText = res.err.Error()
	}
	return soak.WriteJSON(filepath.Join(r.dir, "result.json"), map[string]any{
		"name": r.spec.name, "backend": r.spec.backend, "control": r.spec.control,
		"duration": r.spec.duration.String(), "rate": res.rate, "calibrated": res.measured, "achieved": res.achieved,
		"trends": res.trends, "latency_windows": res.latency.Windows, "latency_limit": res.latency.Limit.String(),
		"history": res.history, "autovacuum_off_warned": res.warned, "failures": res.failures, "error": errText,
		"events": r.events, "samples": res.samples,
	})
}
