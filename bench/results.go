package main

import (
	_ "embed"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// Result is one figure: the runs of one workload on one system.
type Result struct {
	Key      string    `json:"key"`
	Workload string    `json:"workload"`
	System   string    `json:"system"`
	Unit     string    `json:"unit"`
	Higher   bool      `json:"higher_is_better"`
	Runs     []float64 `json:"runs"`
	Median   float64   `json:"median"`
	Min      float64   `json:"min"`
	Max      float64   `json:"max"`
	Counts   []Counts  `json:"counts,omitempty"`
	Note     string    `json:"note,omitempty"`
}

// series collects the runs of one figure.
type series struct {
	vals   []float64
	counts []Counts
}

func (sr *series) add(v float64, c *Counts) {
	sr.vals = append(sr.vals, v)
	if c != nil {
		sr.counts = append(sr.counts, *c)
	}
}

// median is the median of the runs so far (0 without any).
func (sr *series) median() float64 {
	if len(sr.vals) == 0 {
		return 0
	}
	v := slices.Clone(sr.vals)
	slices.Sort(v)
	if len(v)%2 == 0 {
		return (v[len(v)/2-1] + v[len(v)/2]) / 2
	}
	return v[len(v)/2]
}

// record stores a figure; it does nothing when sr has no runs (the
// workload failed before its first run ended).
func (s *Suite) record(key, workload, system, unit string, higher bool, sr *series, note string) *Result {
	if sr == nil || len(sr.vals) == 0 {
		return nil
	}
	v := slices.Clone(sr.vals)
	slices.Sort(v)
	r := &Result{Key: key, Workload: workload, System: system, Unit: unit, Higher: higher,
		Runs: sr.vals, Median: sr.median(), Min: v[0], Max: v[len(v)-1], Counts: sr.counts, Note: note}
	s.mu.Lock()
	s.results = slices.DeleteFunc(s.results, func(o *Result) bool { return o.Key == key })
	s.results = append(s.results, r)
	s.mu.Unlock()
	s.logf("   %-34s %-34s %s", workload, system, fmtFigure(r))
	return r
}

func (s *Suite) result(key string) *Result {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, r := range s.results {
		if r.Key == key {
			return r
		}
	}
	return nil
}

func fmtNum(v float64) string {
	switch a := math.Abs(v); {
	case a >= 1000:
		return fmt.Sprintf("%.1fk", v/1000)
	case a >= 100:
		return fmt.Sprintf("%.0f", v)
	case a >= 10:
		return fmt.Sprintf("%.1f", v)
	default:
		return fmt.Sprintf("%.2f", v)
	}
}

func fmtFigure(r *Result) string {
	if len(r.Runs) == 1 {
		return fmt.Sprintf("%s %s", fmtNum(r.Median), r.Unit)
	}
	return fmt.Sprintf("%s %s (%s–%s)", fmtNum(r.Median), r.Unit, fmtNum(r.Min), fmtNum(r.Max))
}

// comparison is one row of the targets table: ours / other (or ours
// against an absolute bound when other is empty).
type comparison struct {
	group   string
	ours    string
	other   string
	target  float64 // ratio target (ours/other ≥ target); 0 = no target
	atMost  float64 // ratio upper bound, where lower is better (ours/other ≤ atMost); 0 = none
	abs     float64 // absolute upper bound for ours; 0 = none
	atLeast float64 // absolute lower bound for ours; 0 = none
	unit    string  // the unit of abs and atLeast; default "ms"
}

var comparisons = []comparison{
	{group: "Postgres append, 1 entry/tx, 8 callers", ours: "ours.pg.append1", other: "raw.pg.insert1tx", target: 0.9},
	{group: "Postgres append, 1 entry/tx, 8 callers, without notifications", ours: "ours.pg.append1.quiet", other: "raw.pg.insert1tx"},
	{group: "Postgres append, 1 entry/tx, 8 callers: notifications", ours: "ours.pg.append1", other: "ours.pg.append1.quiet"},
	{group: "Postgres append, 1 entry/tx, 8 callers", ours: "ours.pg.append1", other: "raw.pg.insert1auto"},
	{group: "Postgres append, 1 entry/tx, 8 callers", ours: "ours.pg.append1", other: "river.inserttx", target: 2},
	{group: "Postgres append, 1 entry/tx, 8 callers", ours: "ours.pg.append1", other: "wm.append.default"},
	{group: "Postgres append, 1 entry/tx, 8 callers", ours: "ours.pg.append1", other: "wm.append.queue"},
	{group: "Postgres append, 100 entries/tx, 8 callers", ours: "ours.pg.append100", other: "raw.pg.insert100", target: 0.9},
	{group: "Postgres append, 100 entries/tx, 8 callers, without notifications", ours: "ours.pg.append100.quiet", other: "raw.pg.insert100"},
	{group: "Postgres append, 100 entries/tx, 8 callers", ours: "ours.pg.append100", other: "river.insertmanyfast"},
	{group: "Postgres drain, 100k backlog, no-op sink", ours: "ours.pg.drain.noop", other: "river.drain.best", target: 6},
	{group: "Postgres drain, 100k backlog, no-op sink", ours: "ours.pg.drain.noop", other: "wm.sub.default", target: 10},
	{group: "Postgres drain, 100k backlog, no-op sink", ours: "ours.pg.drain.noop", other: "wm.sub.queue"},
	{group: "Postgres drain, 100k backlog, no-op sink", ours: "ours.pg.drain.noop", other: "wm.forwarder"},
	// Issue 32: the drain is anchored on the raw loop with the outbox's
	// guarantee (lock, publish, delete, commit); the claim-and-delete
	// statement, which loses a batch on a crash, stays as the floor.
	{group: "Postgres drain, 100k backlog, no-op sink, against the raw loop with the same guarantee", ours: "ours.pg.drain.noop", other: "raw.pg.claimtx", target: 0.8},
	{group: "Postgres drain, 100k backlog, no-op sink, against the raw loop that deletes on claim", ours: "ours.pg.drain.noop", other: "raw.pg.claimdelete"},
	{group: "Postgres raw drain: the at-least-once loop vs the claim-and-delete statement (what the guarantee costs)", ours: "raw.pg.claimtx", other: "raw.pg.claimdelete"},
	{group: "Postgres drain, 100k backlog, to kfake", ours: "ours.pg.drain.kfake", other: "ours.pg.drain.noop", target: 0.9},
	{group: "Redis append, 1 entry/tx, 8 callers", ours: "ours.redis.append1", other: "raw.redis.append1", target: 0.7},
	{group: "Redis append, 1 entry/tx, 8 callers", ours: "ours.redis.append1", other: "raw.redis.append1tx"},
	{group: "Redis append, 1 entry/tx, 8 callers", ours: "ours.redis.append1", other: "asynq.enqueue"},
	{group: "Redis append, 100 entries/tx, 8 callers", ours: "ours.redis.append100", other: "raw.redis.append100"},
	{group: "Redis drain, 100k backlog, no-op sink", ours: "ours.redis.drain.noop", other: "asynq.drain", target: 3},
	{group: "Redis drain, 100k backlog, no-op sink", ours: "ours.redis.drain.noop", other: "raw.redis.claimdelete", target: 0.5},
	{group: "Redis drain, 100k backlog, to kfake", ours: "ours.redis.drain.kfake", other: "ours.redis.drain.noop", target: 0.9},
	{group: "Postgres sustainable end-to-end rate (32 callers, 1 relay, no-op sink)", ours: "ours.pg.lat.sustainable"},
	{group: "Redis sustainable end-to-end rate (32 callers, 1 relay, no-op sink)", ours: "ours.redis.lat.sustainable"},
	{group: "Postgres commit-to-sink p99, half of the sustainable rate, wake-ups", ours: "ours.pg.lat.wake.p99", abs: 10},
	{group: "Redis commit-to-sink p99, half of the sustainable rate, wake-ups", ours: "ours.redis.lat.wake.p99", abs: 10},
	{group: "Postgres commit-to-sink p99 vs River's commit-to-work p99, same arrivals, half of the Postgres sustainable rate", ours: "ours.pg.lat.wake.p99", other: "river.lat.pg.half.p99", atMost: 0.2},
	{group: "Redis commit-to-sink p99 vs River's commit-to-work p99, same arrivals, half of the Redis sustainable rate", ours: "ours.redis.lat.wake.p99", other: "river.lat.redis.half.p99", atMost: 0.2},
	{group: "Postgres half load, machine CPU busy: appenders and relay vs the raw inserts alone (same arrivals, no outbox, no relay)", ours: "ours.pg.lat.wake.busy", other: "raw.pg.lat.wake.busy"},
	{group: "Postgres commit-to-sink p99, a quarter of the sustainable rate, wake-ups", ours: "ours.pg.lat.wake4.p99"},
	{group: "Postgres quarter load, machine CPU busy: appenders and relay vs the raw inserts alone (same arrivals, no outbox, no relay)", ours: "ours.pg.lat.wake4.busy", other: "raw.pg.lat.wake4.busy"},
	{group: "Redis commit-to-sink p99, a quarter of the sustainable rate, wake-ups", ours: "ours.redis.lat.wake4.p99"},
	{group: "Postgres commit-to-sink p99 vs River's commit-to-work p99, same arrivals, a quarter of the Postgres sustainable rate", ours: "ours.pg.lat.wake4.p99", other: "river.lat.pg.quarter.p99"},
	{group: "Redis commit-to-sink p99 vs River's commit-to-work p99, same arrivals, a quarter of the Redis sustainable rate", ours: "ours.redis.lat.wake4.p99", other: "river.lat.redis.quarter.p99"},
	{group: "Postgres drain, big backlog vs small", ours: "ours.pg.backlog.big.rate", other: "ours.pg.backlog.small.rate", target: 0.9},
	{group: "Postgres raw claim-and-delete, big backlog vs small", ours: "raw.pg.backlog.big.rate", other: "raw.pg.backlog.small.rate"},
	{group: "Redis drain, big backlog vs small", ours: "ours.redis.backlog.big.rate", other: "ours.redis.backlog.small.rate", target: 0.9},
	{group: "Redis raw claim-and-delete, big backlog vs small", ours: "raw.redis.backlog.big.rate", other: "raw.redis.backlog.small.rate"},
	{group: "Postgres, 4 relays vs 1 on 4 partitions", ours: "ours.pg.relays.4", other: "ours.pg.relays.1", target: 0.9},
	{group: "Redis, 4 relays vs 1 on 4 partitions", ours: "ours.redis.relays.4", other: "ours.redis.relays.1", target: 0.9},
	{group: "Postgres, 20 relays on 100 partitions: fewest partitions per relay, converged", ours: "ours.pg.fleet.spread.min", atLeast: fleetFloor, unit: "partitions"},
	{group: "Postgres, 20 relays on 100 partitions: most partitions per relay, converged", ours: "ours.pg.fleet.spread.max", abs: fleetCeil, unit: "partitions"},
	{group: "Postgres, 20 relays on 100 partitions: Start to converged", ours: "ours.pg.fleet.converge"},
	{group: "Postgres, 20 relays vs 1 on 100 partitions, converged drain", ours: "ours.pg.fleet.rate.20", other: "ours.pg.fleet.rate.1", target: 0.9},
	{group: "Postgres, 20 relays vs 1 on 100 partitions, cold-start drain", ours: "ours.pg.fleet.cold.20", other: "ours.pg.fleet.cold.1"},
	{group: "Postgres, 20 relays on 100 partitions: a relay cut off, until its partitions deliver again (LeaseTTL 3 s)", ours: "ours.pg.fleet.recovery", abs: fleetRecoveryMS},
	{group: "Postgres, 4 relays on 64 partitions: fetches per append at 100 appends/s, PollInterval 1 h", ours: "ours.pg.fleet.fetches", abs: 1.1, unit: "fetches/append"},
	{group: "Redis, 20 relays on 100 partitions: fewest partitions per relay, converged", ours: "ours.redis.fleet.spread.min", atLeast: fleetFloor, unit: "partitions"},
	{group: "Redis, 20 relays on 100 partitions: most partitions per relay, converged", ours: "ours.redis.fleet.spread.max", abs: fleetCeil, unit: "partitions"},
	{group: "Redis, 20 relays on 100 partitions: Start to converged", ours: "ours.redis.fleet.converge"},
	{group: "Redis, 20 relays vs 1 on 100 partitions, converged drain", ours: "ours.redis.fleet.rate.20", other: "ours.redis.fleet.rate.1", target: 0.9},
	{group: "Redis, 20 relays vs 1 on 100 partitions, cold-start drain", ours: "ours.redis.fleet.cold.20", other: "ours.redis.fleet.cold.1"},
	{group: "Redis, 20 relays on 100 partitions: a relay cut off, until its partitions deliver again (LeaseTTL 3 s)", ours: "ours.redis.fleet.recovery", abs: fleetRecoveryMS},
	{group: "Redis, 4 relays on 64 partitions: fetches per append at 100 appends/s, PollInterval 1 h", ours: "ours.redis.fleet.fetches", abs: 1.1, unit: "fetches/append"},
	{group: "Postgres W7, one key vs distinct keys, to kfake", ours: "ours.pg.hot.one", other: "ours.pg.hot.many", target: 0.3},
	{group: "Postgres W7, one key vs distinct keys, to kfake, 20 transient produce errors", ours: "ours.pg.hot.one.faults", other: "ours.pg.hot.many.faults", target: 0.3},
	{group: "Postgres W7, one key: what 20 transient produce errors add to the drain", ours: "ours.pg.hot.one.faultcost", abs: 3000},
	{group: "Postgres W7, distinct keys: what 20 transient produce errors add to the drain", ours: "ours.pg.hot.many.faultcost", abs: 3000},
	{group: "Redis W7, one key vs distinct keys, to kfake", ours: "ours.redis.hot.one", other: "ours.redis.hot.many", target: 0.3},
	{group: "Redis W7, one key vs distinct keys, to kfake, 20 transient produce errors", ours: "ours.redis.hot.one.faults", other: "ours.redis.hot.many.faults", target: 0.3},
	{group: "Redis W7, one key: what 20 transient produce errors add to the drain", ours: "ours.redis.hot.one.faultcost", abs: 3000},
	{group: "Redis W7, distinct keys: what 20 transient produce errors add to the drain", ours: "ours.redis.hot.many.faultcost", abs: 3000},
	{group: "Postgres, 20k permanently failing entries over 7 keys: parked per second (10× the 206/s before)", ours: "ours.pg.poison", atLeast: 10 * poisonOldPG, unit: "parked/s"},
	{group: "Redis, 20k permanently failing entries over 7 keys: parked per second (10× the 250/s before)", ours: "ours.redis.poison", atLeast: 10 * poisonOldRedis, unit: "parked/s"},
}

func init() {
	comparisons = append(comparisons, brokerComparisons()...)
	comparisons = append(comparisons, mysqlComparisons()...)
	comparisons = append(comparisons, inboxComparisons()...)
	comparisons = append(comparisons, notifyComparisons()...)
	comparisons = append(comparisons, cpu50Comparisons()...)
}

// The fleet targets: each of the 20 relays holds ⌊100/20⌋ to ⌈100/20⌉
// partitions, and a cut-off relay's partitions deliver again within
// LeaseTTL + 1 s.
const (
	fleetFloor      = float64(fleetPartitions / fleetRelays)
	fleetCeil       = float64((fleetPartitions + fleetRelays - 1) / fleetRelays)
	fleetRecoveryMS = float64((fleetTTL + time.Second) / time.Millisecond)
)

//go:embed analysis.md
var analysisMD string

func (s *Suite) markdownTables() string {
	var b strings.Builder
	b.WriteString("## Targets (ratios measured in this run)\n\n")
	b.WriteString("The ratio is the median of the per-round ratios (each round measures both sides, so a\n")
	b.WriteString("round's ratio shares that round's machine load); the per-round ratios follow it.\n\n")
	b.WriteString("| comparison | ours | against | ratio | per round | target | met |\n|---|---|---|---|---|---|---|\n")
	for _, c := range comparisons {
		c.group = strings.Replace(c.group, "100k backlog", human(s.cfg.N)+" backlog", 1)
		o := s.result(c.ours)
		if o == nil {
			fmt.Fprintf(&b, "| %s | not measured | | | | %s | — |\n", c.group, targetText(c))
			continue
		}
		if c.other == "" {
			met := "yes"
			switch {
			case c.abs == 0 && c.atLeast == 0:
				met = "—"
			case c.abs > 0 && o.Median > c.abs, c.atLeast > 0 && o.Median < c.atLeast:
				met = "**no**"
			}
			fmt.Fprintf(&b, "| %s | %s | — | — | %s | %s | %s |\n", c.group, fmtFigure(o), joinNums(o.Runs, " "+o.Unit), targetText(c), met)
			continue
		}
		x := s.result(c.other)
		if x == nil {
			fmt.Fprintf(&b, "| %s | %s | %s: not measured | | | %s | — |\n", c.group, fmtFigure(o), c.other, targetText(c))
			continue
		}
		ratio, per := ratios(o, x)
		met := "—"
		switch {
		case c.target > 0:
			met = "yes"
			if ratio < c.target {
				met = "**no**"
			}
		case c.atMost > 0:
			met = "yes"
			if ratio > c.atMost {
				met = "**no**"
			}
		}
		fmt.Fprintf(&b, "| %s | %s | %s %s | %s× | %s | %s | %s |\n", c.group, fmtFigure(o), x.System, fmtFigure(x), fmtRatio(ratio), per, targetText(c), met)
	}
	b.WriteString("\n## Every figure (median of the runs, min–max)\n\n")
	b.WriteString("| workload | system | median | min | max | unit | delivered / duplicates / order violations |\n|---|---|---|---|---|---|---|\n")
	s.mu.Lock()
	rs := slices.Clone(s.results)
	s.mu.Unlock()
	for _, r := range rs {
		cnt := ""
		if len(r.Counts) > 0 {
			var d, dup, ov []string
			for _, c := range r.Counts {
				d = append(d, fmt.Sprint(c.Delivered))
				dup = append(dup, fmt.Sprint(c.Duplicates))
				ov = append(ov, fmt.Sprint(c.OrderViolations))
			}
			cnt = strings.Join(d, ",") + " / " + strings.Join(dup, ",") + " / " + strings.Join(ov, ",")
		}
		sys := r.System
		if r.Note != "" {
			sys += " (" + r.Note + ")"
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %s |\n", r.Workload, sys, fmtNum(r.Median), fmtNum(r.Min), fmtNum(r.Max), r.Unit, cnt)
	}
	return b.String()
}

// fmtRatio prints a ratio with two decimals, or two significant digits
// below 0.1 (a latency ratio can be far below it).
func fmtRatio(r float64) string {
	if r != 0 && math.Abs(r) < 0.1 {
		return fmt.Sprintf("%.2g", r)
	}
	return fmt.Sprintf("%.2f", r)
}

// ratios returns ours/other: the median of the per-round ratios when both
// have one run per round, else the ratio of the medians; and the per-round
// ratios as text.
func ratios(o, x *Result) (float64, string) {
	if len(o.Runs) != len(x.Runs) || len(o.Runs) < 2 {
		return o.Median / x.Median, ""
	}
	rs := make([]float64, len(o.Runs))
	for i := range rs {
		rs[i] = o.Runs[i] / x.Runs[i]
	}
	text := joinNums(rs, "×")
	slices.Sort(rs)
	m := rs[len(rs)/2]
	if len(rs)%2 == 0 {
		m = (rs[len(rs)/2-1] + rs[len(rs)/2]) / 2
	}
	return m, text
}

func joinNums(vs []float64, unit string) string {
	parts := make([]string, len(vs))
	for i, v := range vs {
		parts[i] = fmt.Sprintf("%.2f%s", v, unit)
	}
	return strings.Join(parts, ", ")
}

// drainTitle names a drain workload: "Postgres drain, 100k backlog, no-op sink".
func (s *Suite) drainTitle(backend, sink string) string {
	return fmt.Sprintf("%s drain, %s backlog, %s", backend, human(s.cfg.N), sink)
}

func targetText(c comparison) string {
	unit := c.unit
	if unit == "" {
		unit = "ms"
	}
	switch {
	case c.abs > 0:
		return fmt.Sprintf("≤ %g %s", c.abs, unit)
	case c.atLeast > 0:
		return fmt.Sprintf("≥ %g %s", c.atLeast, unit)
	case c.target > 0:
		return fmt.Sprintf("≥ %g×", c.target)
	case c.atMost > 0:
		return fmt.Sprintf("≤ %g×", c.atMost)
	}
	return ""
}

func (s *Suite) writeReports() error {
	for _, p := range []string{s.cfg.DocPath, s.cfg.JSONPath} {
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
	}
	if err := s.writeJSON(); err != nil {
		return err
	}
	return s.writeDoc()
}

// report is the content of results.json.
type report struct {
	Machine  MachineInfo `json:"machine"`
	Results  []*Result   `json:"results"`
	Failures []string    `json:"failures"`
}

// render rewrites the markdown report from a saved results.json (flag
// -render), e.g. after editing analysis.md, without measuring again.
func render(cfg Config, path string) error {
	r, err := readReport(path)
	if err != nil {
		return err
	}
	cfg.N = r.Machine.N
	s := &Suite{cfg: cfg, info: r.Machine, results: r.Results, failures: r.Failures}
	return s.writeDoc()
}

func readReport(path string) (report, error) {
	var r report
	b, err := os.ReadFile(path)
	if err != nil {
		return r, err
	}
	if err := json.Unmarshal(b, &r); err != nil {
		return r, fmt.Errorf("%s: %w", path, err)
	}
	return r, nil
}

// merge puts the figures of the results.json of a run of some workloads
// (from, e.g. written by -only … -out DIR) into cfg.JSONPath in place of
// the figures of the same keys, each noted with the date of its run, and
// rewrites the markdown report (flag -merge). A quick run, a run of
// another N or a run with failures is refused.
func merge(cfg Config, from string) error {
	pub, err := readReport(cfg.JSONPath)
	if err != nil {
		return err
	}
	add, err := readReport(from)
	if err != nil {
		return err
	}
	switch {
	case add.Machine.Quick:
		return fmt.Errorf("%s is a -quick run's: its figures are not meaningful; run without -quick", from)
	case add.Machine.N != pub.Machine.N:
		return fmt.Errorf("%s measured N=%d, %s N=%d: run with -n %d", from, add.Machine.N, cfg.JSONPath, pub.Machine.N, pub.Machine.N)
	case len(add.Failures) > 0:
		return fmt.Errorf("%s has %d failure(s) (%s): fix them and run again", from, len(add.Failures), add.Failures[0])
	}
	when := fmt.Sprintf("measured %s, %d rounds, in a run of its own", add.Machine.Date, add.Machine.Runs)
	for _, r := range add.Results {
		r.Note = strings.TrimPrefix(r.Note+"; "+when, "; ")
		if i := slices.IndexFunc(pub.Results, func(o *Result) bool { return o.Key == r.Key }); i >= 0 {
			pub.Results[i] = r
		} else {
			pub.Results = append(pub.Results, r)
		}
	}
	for k, v := range add.Machine.Peers {
		if _, ok := pub.Machine.Peers[k]; !ok {
			pub.Machine.Peers[k] = v
		}
	}
	cfg.N = pub.Machine.N
	s := &Suite{cfg: cfg, info: pub.Machine, results: pub.Results, failures: pub.Failures}
	if err := s.writeJSON(); err != nil {
		return err
	}
	return s.writeDoc()
}

func (s *Suite) writeJSON() error {
	s.mu.Lock()
	j, err := json.MarshalIndent(report{Machine: s.info, Results: s.results, Failures: s.failures}, "", "  ")
	s.mu.Unlock()
	if err != nil {
		return err
	}
	return os.WriteFile(s.cfg.JSONPath, append(j, '\n'), 0o644)
}

func (s *Suite) writeDoc() error {
	if err := os.MkdirAll(filepath.Dir(s.cfg.DocPath), 0o755); err != nil {
		return err
	}
	var b strings.Builder
	b.WriteString("# Benchmarks\n\n")
	b.WriteString("<!-- Generated by `cd bench && go run .`; edit bench/analysis.md, not this file. -->\n\n")
	b.WriteString("Reproduce: `cd bench && go run .` (about 16 minutes on a 2-core machine, the W5 fleet and W3's sustainable-rate searches included, and the broker rows of issue 29 another 15 on a loaded one; `-only REGEXP` / `-skip REGEXP` pick systems,\n")
	b.WriteString("`-n`, `-runs` change the size). `go run . -quick` runs every workload at small N in well under\n")
	b.WriteString("two minutes and only checks that the harness works and that every count is right; it writes its\n")
	b.WriteString("report to a temporary directory (or `-out DIR`), never to this file, so CI leaves the tree clean.\n")
	b.WriteString("`go run . -merge DIR/results.json` puts the figures of a run of some workloads (`-only … -out DIR`) into this\n")
	b.WriteString("report in place of the same figures, each noted with the date of its run; the machine table stays the full run's.\n\n")
	mode := "full run"
	if s.info.Quick {
		mode = "QUICK run (small N; the figures are not meaningful)"
	}
	fmt.Fprintf(&b, "## Machine (%s)\n\n", mode)
	fmt.Fprintf(&b, "| | |\n|---|---|\n| date | %s |\n| CPU | %s, %d cores |\n| memory | %.1f GiB |\n| Go | %s |\n| PostgreSQL | %s |\n| Redis | %s |\n",
		s.info.Date, s.info.CPU, s.info.Cores, s.info.MemoryGB, s.info.Go, s.info.Postgres, s.info.Redis)
	peers := make([]string, 0, len(s.info.Peers))
	for k := range s.info.Peers {
		peers = append(peers, k)
	}
	slices.Sort(peers)
	for _, k := range peers {
		fmt.Fprintf(&b, "| %s | %s |\n", k, s.info.Peers[k])
	}
	fmt.Fprintf(&b, "| backlog / batched appends | %d entries |\n| 1-entry-per-tx appends | %d transactions |\n| runs per figure | %d (median, min–max) |\n| payload | %d bytes, keys from %d aggregates |\n| run time | %s |\n\n",
		s.info.N, s.info.N1, s.info.Runs, PayloadSize, Aggregates, s.info.Elapsed)
	b.WriteString(s.markdownTables())
	b.WriteString("\n")
	b.WriteString(analysisMD)
	return os.WriteFile(s.cfg.DocPath, []byte(b.String()), 0o644)
}
