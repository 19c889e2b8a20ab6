package main

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/outboxrelay/outbox/chaos/internal/soak"
)

// writeSoakReport writes OUT/soak.md and its charts OUT/images/soak-*.png
// and returns the report's path.
func writeSoakReport(cfg soakConfig, feat relayFeat, results []*soakResult, elapsed time.Duration) (string, error) {
	imgDir := filepath.Join(cfg.out, "images")
	if err := os.MkdirAll(imgDir, 0o755); err != nil {
		return "", err
	}
	var b strings.Builder
	writeSoakIntro(&b, cfg, feat, results, elapsed)
	for _, r := range results {
		if r.skipped != "" {
			fmt.Fprintf(&b, "\n## %s\n\nSkipped: %s\n", r.spec.name, r.skipped)
			continue
		}
		charts, err := writeSoakCharts(imgDir, r)
		if err != nil {
			return "", err
		}
		writeSoakSection(&b, cfg, r, charts)
	}
	path := filepath.Join(cfg.out, "soak.md")
	return path, os.WriteFile(path, []byte(b.String()), 0o644)
}

func writeSoakIntro(b *strings.Builder, cfg soakConfig, feat relayFeat, results []*soakResult, elapsed time.Duration) {
	verdict := "passed"
	for _, r := range results {
		if !r.passed() {
			verdict = "FAILED"
		}
	}
	fmt.Fprintf(b, `# Soak

Written by `+"`./scripts/soak.sh`"+` (the chaos harness's `+"`chaos soak`"+`) on %s UTC,
%d cores (%s/%s), in %s. Verdict: **%s**.

## Setup

Per backend, on this machine: a private server started by the harness
(PostgreSQL with autovacuum on%s, or redis-server without persistence),
`+"`outbox migrate up --partitions %d`"+`, %d `+"`outbox relay`"+` processes publishing to a kfake
broker process (%d partitions), %d appender processes (one entry per
transaction, %d keys each, each append stamped with its time in a header),
and a Kafka consumer in the harness that takes every record's
commit-to-publish latency: the record's timestamp (set by the relay's
producer as it publishes, millisecond resolution) minus the stamp. Relay
flags: `+"`%s`"+`.

- Load: %v per backend%s.
- Faults: one relay restarted (SIGTERM, exit, start) every %v from %v on;
  one relay's store connections killed (PostgreSQL `+"`pg_terminate_backend`"+` by
  application_name, Redis `+"`CLIENT KILL ID`"+` of its connections by client name)
  every %v from %v on.
- Every %v: latency p50/p99/max of the records published since the last
  sample, the backlog (`+"`outbox status`"+` pending), each relay's RSS
  (/proc/PID/status VmRSS) and goroutines (`+"`go_goroutines`"+` on its --metrics-addr),
  the outbox table's and the archive's `+"`pg_total_relation_size`"+`, `+"`n_dead_tup`"+`
  and vacuum count, Redis `+"`used_memory`"+` and `+"`mem_fragmentation_ratio`"+`, rows
  removed by retention (`+"`outbox_retention_removed_total`"+`, summed over the
  relays) and the archive's row count. The samples are in samples.csv and
  result.json in each run's directory.

## Checks

1. **Trend.** For every resource series a least-squares slope is fitted over
   the last half of the run; the run fails when the slope times the run's
   duration (the growth the trend implies over the run) exceeds a bound. A
   relay's series are fitted with one slope and an intercept per process
   generation (a restart starts over at a lower RSS; that drop is not a
   trend, a leak inside each generation is), leaving out the first %v of a
   restarted relay. The bounds (growth over the run must stay under the
   larger of the two):

   | resource | relative to the series' mean | absolute floor | why |
   |---|---|---|---|
   | relay RSS, each relay | %.0f%% | %s | a Go process's heap breathes with GC by a few MiB; a leak of 16 MiB an hour per relay is one we want to see |
   | relay goroutines | %.0f%% | %.0f | a few goroutines come and go with connections and leases; a leak of one per batch is thousands |
   | table size with indexes (outbox, archive) | %.0f%% | %s | a queue table's size moves with its free space map; bloat shows as steady growth |
   | dead tuples (outbox, archive) | %.0f%% | %.0f rows, and with autovacuum on 3x the rate received x autovacuum_naptime | autovacuum runs in a sawtooth as high as the rows deleted between two looks of the launcher; with it off they grow by the delete rate, the rate x the run's duration |
   | Redis used_memory | %.0f%% | %s | allocator noise; an unbounded key shows as steady growth |
   | backlog | %.0f%% | %.0f entries | the backlog at a steady rate is a few batches; a relay falling behind grows it without bound |

2. **Latency.** The p99 of every %v window of the load is at most %.0fx that of
   the first window%s. A window in which nothing was published fails.
3. **History** (package chaos/history): every committed entry delivered, no
   key's order broken, nothing delivered that was never appended.
4. **Negative controls**, in every run: a relay that leaks (`+"`chaos control-relay -mode leak`"+`,
   an honest relay whose process keeps %s more memory over the
   control's load) must be flagged by the RSS trend check; and a PostgreSQL
   with `+"`autovacuum = off`"+` (same harness, one relay, %d entries/s) must make a relay
   log the `+"`autovacuum-off`"+` warning and the trend check flag the outbox
   table's dead tuples or size. A control that passes fails the run.
`,
		time.Now().UTC().Format("2006-01-02 15:04"), runtime.NumCPU(), runtime.GOOS, runtime.GOARCH, elapsed.Round(time.Second), verdict,
		naptimeNote(cfg), cfg.partitions, cfg.relays, cfg.partitions, cfg.appenders, cfg.keys, relayFlagsNote(cfg, feat),
		cfg.duration, rateNote(cfg),
		cfg.restartEvery, cfg.restartAt, cfg.killEvery, cfg.killAt, cfg.sample,
		cfg.warmup,
		cfg.bounds[soak.SeriesRSS].Rel*100, soak.HumanBytes(cfg.bounds[soak.SeriesRSS].Abs),
		cfg.bounds[soak.SeriesGoroutines].Rel*100, cfg.bounds[soak.SeriesGoroutines].Abs,
		cfg.bounds[soak.SeriesTableBytes].Rel*100, soak.HumanBytes(cfg.bounds[soak.SeriesTableBytes].Abs),
		cfg.bounds[soak.SeriesDeadTuples].Rel*100, cfg.bounds[soak.SeriesDeadTuples].Abs,
		cfg.bounds[soak.SeriesUsedMemory].Rel*100, soak.HumanBytes(cfg.bounds[soak.SeriesUsedMemory].Abs),
		cfg.bounds[soak.SeriesBacklog].Rel*100, cfg.bounds[soak.SeriesBacklog].Abs,
		cfg.window, cfg.latFactor, latFloorNote(cfg),
		soak.HumanBytes(64<<20), cfg.controlRate)
}

// latFloorNote is the latency rule's floor, in words; "" without one.
func latFloorNote(cfg soakConfig) string {
	if cfg.latFloor <= 0 {
		return ""
	}
	return fmt.Sprintf(", or the first window's plus %v when that is more (the short run's floor: at p99s of a few milliseconds one scheduler delay on a loaded 2-core machine is a factor of 2)", cfg.latFloor)
}

func naptimeNote(cfg soakConfig) string {
	if cfg.naptime > 0 {
		return fmt.Sprintf(", autovacuum_naptime %v", cfg.naptime)
	}
	return ", the default autovacuum_naptime (1 min)"
}

func relayFlagsNote(cfg soakConfig, feat relayFeat) string {
	s := "--log-format json --drain-timeout 5s --metrics-addr 127.0.0.1:PORT, the rest at their defaults"
	if feat.archive && feat.retention {
		s += fmt.Sprintf("; on PostgreSQL --archive --archive-retention %v", cfg.retention)
		if feat.retentionInterval {
			s += fmt.Sprintf(" --retention-interval %v", cfg.retInterval)
		}
	}
	if feat.healthInterval {
		s += fmt.Sprintf("; --health-interval %v", cfg.sample)
	}
	return s
}

func rateNote(cfg soakConfig) string {
	if cfg.rate > 0 {
		return fmt.Sprintf(" at a fixed %d entries/s", cfg.rate)
	}
	return fmt.Sprintf(", at half the sustainable rate measured first on the same setup as the benchmark measures it "+
		"(the highest rate whose backlog stays flat): %v of appenders unthrottled with the relays running, "+
		"the rate counted at the consumer over its last two thirds (the slower of appending and relaying), "+
		"then a drain. (bench/results.json's sustainable rates are for a no-op sink and batched appends, "+
		"far above what one-entry transactions into a Kafka broker process sustain here.)", cfg.calibrate)
}

// soakCharts are a run's chart files, relative to the report.
type soakCharts map[string]string

func writeSoakCharts(imgDir string, r *soakResult) (soakCharts, error) {
	out := soakCharts{}
	names := soak.SeriesNames(r.samples)
	pick := func(kind string) []string {
		var s []string
		for _, n := range names {
			if soak.Kind(n) == kind {
				s = append(s, n)
			}
		}
		return s
	}
	charts := []struct {
		key string
		c   soak.Chart
	}{
		{"latency", soak.Chart{Title: r.spec.name + ": commit-to-publish latency per 10 s", YLabel: "ms (log scale)",
			Series: []string{"latency_p50_ms", "latency_p99_ms", "latency_max_ms"}, Legend: []string{"p50", "p99", "max"}, Log: true}},
		{"rss", soak.Chart{Title: r.spec.name + ": relay RSS", YLabel: "MiB", Series: pick(soak.SeriesRSS), Scale: 1.0 / (1 << 20)}},
		{"tables", soak.Chart{Title: r.spec.name + ": table size with indexes", YLabel: "MiB", Series: pick(soak.SeriesTableBytes), Scale: 1.0 / (1 << 20)}},
		{"dead", soak.Chart{Title: r.spec.name + ": dead tuples", YLabel: "rows", Series: pick(soak.SeriesDeadTuples)}},
		{"memory", soak.Chart{Title: r.spec.name + ": Redis used_memory", YLabel: "MiB", Series: []string{soak.SeriesUsedMemory}, Scale: 1.0 / (1 << 20)}},
	}
	for _, c := range charts {
		if !anySeries(r.samples, c.c.Series) {
			continue
		}
		file := fmt.Sprintf("soak-%s-%s.png", r.spec.name, c.key)
		if err := soak.WritePNG(filepath.Join(imgDir, file), c.c, r.samples); err != nil {
			return nil, err
		}
		out[c.key] = "images/" + file
	}
	return out, nil
}

func anySeries(samples []soak.Sample, names []string) bool {
	for _, n := range names {
		if len(soak.Series(samples, n)) > 0 {
			return true
		}
	}
	return false
}

func writeSoakSection(b *strings.Builder, cfg soakConfig, r *soakResult, charts soakCharts) {
	verdict := "passed"
	if !r.passed() {
		verdict = "FAILED"
	}
	title := r.spec.name
	if r.spec.control != "" {
		title += " (negative control: must be caught)"
	}
	fmt.Fprintf(b, "\n## %s\n\n%s. %v of load at %d entries/s", title, verdict, r.spec.duration, r.rate)
	if r.measured > 0 {
		fmt.Fprintf(b, " (calibration: %.0f entries/s sustained)", r.measured)
	}
	fmt.Fprintf(b, "; %.0f entries/s received; %d samples; %v in all.\n", r.achieved, len(r.samples), r.elapsed.Round(time.Second))
	if r.err != nil {
		fmt.Fprintf(b, "\nThe run stopped: %v\n", r.err)
	}
	for _, f := range r.failures {
		fmt.Fprintf(b, "\n- **%s**", f)
	}
	if len(r.failures) > 0 {
		b.WriteString("\n")
	}
	if len(r.events) > 0 {
		b.WriteString("\nTimeline:\n\n")
		for _, e := range r.events {
			fmt.Fprintf(b, "- %s\n", e)
		}
	}
	if len(r.trends) > 0 {
		b.WriteString("\nTrend over the last half (slope per hour; growth = slope x the run's duration):\n\n| series | slope per hour | growth over the run | limit | mean | verdict |\n|---|---|---|---|---|---|\n")
		for _, t := range r.trends {
			v := "flat"
			switch {
			case !t.Fitted:
				v = "too few samples"
			case t.Flagged:
				v = "**grows**"
			}
			fmt.Fprintf(b, "| %s | %s | %s | %s | %s | %s |\n", t.Series, soak.Human(t.Series, t.SlopePerHour), soak.Human(t.Series, t.Growth),
				soak.Human(t.Series, t.Limit), soak.Human(t.Series, t.Mean), v)
		}
	}
	if len(r.latency.Windows) > 0 {
		fmt.Fprintf(b, "\nLatency per %v window (limit on p99: %v):\n\n| window | records | p50 | p99 | max |\n|---|---|---|---|---|\n", cfg.window, r.latency.Limit)
		for i, w := range r.latency.Windows {
			fmt.Fprintf(b, "| %d | %d | %v | %v | %v |\n", i+1, w.N, w.P50, w.P99, w.Max)
		}
	}
	writeDeadTuples(b, r)
	if h := r.history; h != nil {
		fmt.Fprintf(b, "\nHistory: %d appended, %d delivered, %d lost, %d order violations, %d duplicates (%d faults), %d never appended.\n",
			h.Appended, h.Delivered, len(h.Lost), len(h.OrderViolations), h.Duplicates, len(h.Faults), len(h.Unexpected))
	}
	if r.spec.control == controlAutovacuum {
		fmt.Fprintf(b, "\nautovacuum-off warning in a relay's log: %v.\n", r.warned)
	}
	for _, key := range []string{"latency", "rss", "tables", "dead", "memory"} {
		if f, ok := charts[key]; ok {
			fmt.Fprintf(b, "\n![%s %s](%s)\n", r.spec.name, key, f)
		}
	}
}

// writeDeadTuples tabulates the outbox table's dead tuples, size and
// vacuums over the run, a row every tenth of it.
func writeDeadTuples(b *strings.Builder, r *soakResult) {
	dead := soak.Series(r.samples, soak.SeriesDeadTuples+":outbox")
	if len(dead) == 0 {
		return
	}
	size := soak.Series(r.samples, soak.SeriesTableBytes+":outbox")
	vac := soak.Series(r.samples, "vacuums:outbox")
	b.WriteString("\nThe outbox table over the run:\n\n| minute | dead tuples | size with indexes | vacuums so far |\n|---|---|---|---|\n")
	step := max(1, len(dead)/10)
	for i := 0; i < len(dead); i += step {
		row := fmt.Sprintf("| %.1f | %.0f |", dead[i].T/60, dead[i].V)
		if i < len(size) {
			row += " " + soak.HumanBytes(size[i].V) + " |"
		} else {
			row += " |"
		}
		if i < len(vac) {
			row += fmt.Sprintf(" %.0f |", vac[i].V)
		} else {
			row += " |"
		}
		b.WriteString(row + "\n")
	}
}
