package main

import (
	"cmp"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/outboxrelay/outbox/chaos/history"
	"github.com/outboxrelay/outbox/chaos/internal/exactlyonce"
)

// result is what one scenario run came to.
type result struct {
	sc      *scenario
	report  *history.Report
	err     error
	started time.Time
	elapsed time.Duration
	dir     string
	events  []string
	// observed is what the harness saw of the broker beside the check.
	observed []string
	skipped  string // why the scenario did not run (a missing service)
	// relayLog counts the warnings and errors the relays logged.
	relayLog []logCount
	// appenders are the appenders' summary lines.
	appenders []string
	// effects is an inbox/ scenario's exactly-once check, consumerKills
	// how many consumers it SIGKILLed.
	effects       *exactlyonce.Report
	consumerKills int
}

// passed: the run completed and, inside the guarantees, nothing was lost,
// reordered or made up; a negative control passes when the checker
// caught it.
func (r *result) passed() bool {
	if r.skipped != "" {
		return true
	}
	if r.err != nil || r.report == nil {
		return false
	}
	if r.sc.inbox != nil {
		return r.inboxPassed()
	}
	if r.sc.control != "" {
		return !r.report.OK()
	}
	return r.ok() || r.sc.outside != ""
}

// ok: nothing lost, reordered or made up, and no duplicate where the
// broker drops them.
func (r *result) ok() bool {
	return r.report.OK() && (r.sc.noDuplicates == "" || r.report.Duplicates == 0)
}

func (r *result) verdict() string {
	switch {
	case r.skipped != "":
		return "skipped"
	case r.err != nil:
		return "ERROR"
	case r.sc.inbox != nil && r.sc.inbox.control():
		return map[bool]string{true: "caught", false: "NOT CAUGHT"}[r.passed()]
	case r.sc.inbox != nil:
		return map[bool]string{true: "ok", false: "FAIL"}[r.passed()]
	case r.sc.control != "" && r.passed():
		return "caught"
	case r.sc.control != "":
		return "NOT CAUGHT"
	case r.ok():
		return "ok"
	case r.sc.outside != "":
		return "outside the guarantees"
	default:
		return "FAIL"
	}
}

func (r *result) summary() string {
	if r.skipped != "" {
		return fmt.Sprintf("chaos: %s: skipped: %s (OUTBOX_REQUIRE_SERVICES=1 makes this a failure)", r.sc.name, r.skipped)
	}
	if r.err != nil {
		return fmt.Sprintf("chaos: %s: ERROR after %s: %v (logs: %s)", r.sc.name, r.elapsed.Round(time.Second), r.err, r.dir)
	}
	if r.sc.control != "" && r.passed() {
		return fmt.Sprintf("chaos: %s: caught in %s (a negative control: the checker must fail it, and did): %v", r.sc.name, r.elapsed.Round(time.Second), r.report)
	}
	if r.sc.inbox != nil {
		return fmt.Sprintf("chaos: %s: %s in %s: %v; consumers' effects (%d consumer kills): %v", r.sc.name, r.verdict(), r.elapsed.Round(time.Second), r.report, r.consumerKills, r.effects)
	}
	return fmt.Sprintf("chaos: %s: %s in %s: %v", r.sc.name, r.verdict(), r.elapsed.Round(time.Second), r.report)
}

// targets says which of the targets the run missed: recovery
// within a lease plus a second, duplicates at most a batch per partition
// per fault.
func (r *result) targets(c config) string {
	if r.report == nil || r.sc.control != "" {
		return ""
	}
	var miss []string
	if lim := r.sc.lease(c) + time.Second; r.report.RecoveryMax > lim {
		miss = append(miss, fmt.Sprintf("recovery max %s > %s", dur(r.report.RecoveryMax), dur(lim)))
	}
	if lim := c.batch * c.partitions; r.report.MaxDuplicatesPerFault() > lim {
		miss = append(miss, fmt.Sprintf("%d duplicates in one fault > %d", r.report.MaxDuplicatesPerFault(), lim))
	}
	if len(miss) == 0 {
		return "met"
	}
	return strings.Join(miss, "; ")
}

func dur(d time.Duration) string {
	switch {
	case d >= 10*time.Second:
		return d.Round(100 * time.Millisecond).String()
	case d >= time.Second:
		return d.Round(10 * time.Millisecond).String()
	default:
		return d.Round(time.Millisecond).String()
	}
}

const tableHeader = "| scenario | store | entries (unknown) | faults | lost | duplicates total / max per fault | order violations | unexpected | recovery p50 / p90 / max | verdict |\n" +
	"|---|---|---:|---:|---:|---:|---:|---:|---|---|\n"

func markdownTable(rs []*result) string {
	var b strings.Builder
	b.WriteString(tableHeader)
	for _, r := range rs {
		if r.skipped != "" {
			fmt.Fprintf(&b, "| %s | %s | | | | | | | | skipped: %s |\n", r.sc.name, r.sc.backend, oneLine(r.skipped))
			continue
		}
		if r.report == nil {
			fmt.Fprintf(&b, "| %s | %s | | | | | | | | ERROR: %s |\n", r.sc.name, r.sc.backend, oneLine(fmt.Sprint(r.err)))
			continue
		}
		p := r.report
		fmt.Fprintf(&b, "| %s | %s | %d (%d) | %d | %d | %d / %d | %d | %d | %s / %s / %s | %s |\n",
			r.sc.name, r.sc.backend, p.Appended, p.Unknown, len(p.Faults), len(p.Lost),
			p.Duplicates, p.MaxDuplicatesPerFault(), len(p.OrderViolations), len(p.Unexpected),
			dur(p.RecoveryP50), dur(p.RecoveryP90), dur(p.RecoveryMax), r.verdict())
	}
	b.WriteString(effectsTable(rs))
	return b.String()
}

type kindSummary struct {
	kind          string
	n, lost, dups int
	p50, max      time.Duration
}

// byKind sums the faults by kind (the What before ": "), in the order each
// kind first occurred.
func byKind(r *history.Report) []kindSummary {
	var out []kindSummary
	idx := map[string]int{}
	recs := map[string][]time.Duration{}
	for _, f := range r.Faults {
		k, _, _ := strings.Cut(f.What, ": ")
		i, ok := idx[k]
		if !ok {
			i = len(out)
			idx[k] = i
			out = append(out, kindSummary{kind: k})
		}
		out[i].n++
		out[i].lost += f.Lost
		out[i].dups += f.Duplicates
		recs[k] = append(recs[k], f.Recovery)
	}
	for i := range out {
		ds := recs[out[i].kind]
		slices.Sort(ds)
		out[i].p50 = ds[(len(ds)-1)/2]
		out[i].max = ds[len(ds)-1]
	}
	return out
}

// perPartition renders each partition's recovery compactly, in partition
// order: "p0 0.12s, p1 3.4s, ...".
func perPartition(m map[string]time.Duration) string {
	names := slices.Collect(maps.Keys(m))
	slices.SortFunc(names, func(a, b string) int {
		return cmp.Or(cmp.Compare(len(a), len(b)), strings.Compare(a, b))
	})
	parts := make([]string, len(names))
	for i, n := range names {
		parts[i] = fmt.Sprintf("%s %s", strings.Replace(n, "outbox partition ", "p", 1), dur(m[n]))
	}
	return strings.Join(parts, ", ")
}

func oneLine(s string) string {
	s = strings.ReplaceAll(s, "\n", " ")
	s = strings.ReplaceAll(s, "|", "/")
	if len(s) > 200 {
		s = s[:200] + "..."
	}
	return s
}

// writeReport writes docs/reliability.md: how the run was made, the
// table, and per scenario what it injects, what it found and its
// timeline where it keeps one.
func writeReport(path string, h *harness, rs []*result, took time.Duration) error {
	c := h.cfg
	var b strings.Builder
	b.WriteString(reportIntro)
	mode := "full"
	if c.short {
		mode = "short (-short)"
	}
	fmt.Fprintf(&b, "## The run\n\n%s run of %s, %d scenarios in %s on this repository's 2-core CI machine, %d at a time. Each scenario: %d appender processes (%d keys each, %d transactions/s each, one entry per transaction), %d outbox partitions and a Kafka topic of %d partitions on a kfake broker process, `outbox relay` processes with `--lease-ttl %s --kafka-publish-timeout %s --batch %d --poll-interval 250ms`; the nats/ and amqp/ scenarios publish instead to a private nats-server or RabbitMQ node through `--sink-url` (a stream, or a durable queue, instead of the topic; the same publish timeout; amqp/ with `--lease-ttl 15s`, above 1.5 times the RabbitMQ sink's landing bound). Targets: nothing lost and no order violation inside the guarantees; at most one batch per partition duplicated per fault (%d); recovery within a lease plus a second (%s).\n\n",
		mode, time.Now().UTC().Format("2006-01-02"), len(rs), took.Round(time.Second), c.parallel,
		c.appenders, c.keys, c.rate, c.partitions, c.partitions, c.leaseTTL, c.publish, c.batch,
		c.batch*c.partitions, c.leaseTTL+time.Second)
	b.WriteString(markdownTable(rs))
	b.WriteString("\nEntries counts the entries whose commit the appenders saw succeed; unknown counts those whose commit outcome stayed unknown (they may or may not be delivered, and never count as lost). Recovery is per fault: the longest time an outbox partition that was delivering before the fault went without a delivery after it (see package chaos/history).\n\n")
	b.WriteString("## Targets\n\n| scenario | duplicates per fault, recovery |\n|---|---|\n")
	for _, r := range rs {
		if r.report != nil && r.sc.control == "" {
			fmt.Fprintf(&b, "| %s | %s |\n", r.sc.name, r.targets(c))
		}
	}
	b.WriteString("\n## Scenarios\n")
	for _, r := range rs {
		fmt.Fprintf(&b, "\n### %s\n\n%s, on %s, publishing to %s.\n\n%s\n", r.sc.name, r.sc.title, r.sc.backend, r.sc.broker.describe(), r.sc.notes)
		if r.sc.outside != "" {
			fmt.Fprintf(&b, "\n**Outside the guarantees.** %s\n", r.sc.outside)
		}
		if r.sc.noDuplicates != "" {
			fmt.Fprintf(&b, "\n**No duplicate.** %s A duplicate fails the run.\n", r.sc.noDuplicates)
		}
		if r.skipped != "" {
			fmt.Fprintf(&b, "\nSkipped: %s\n", oneLine(r.skipped))
			continue
		}
		if r.err != nil {
			fmt.Fprintf(&b, "\nThe run did not complete: `%s`\n", oneLine(r.err.Error()))
			continue
		}
		fmt.Fprintf(&b, "\nResult (%s):\n\n```\n%v\n```\n", r.verdict(), r.report)
		b.WriteString(effectsSection(r))
		if kinds := byKind(r.report); len(kinds) > 0 {
			b.WriteString("\nBy kind of fault (lost entries by the fault before their commit, duplicates by the fault before their delivery):\n\n| fault | count | lost | duplicates | recovery p50 / max |\n|---|---:|---:|---:|---|\n")
			for _, k := range kinds {
				fmt.Fprintf(&b, "| %s | %d | %d | %d | %s / %s |\n", k.kind, k.n, k.lost, k.dups, dur(k.p50), dur(k.max))
			}
		}
		for _, o := range r.observed {
			fmt.Fprintf(&b, "\n%s\n", o)
		}
		if len(r.report.Faults) > 0 {
			b.WriteString("\nFaults, with the lost entries, duplicates and recovery attributed to each (first 12)")
			if r.sc.watch != nil {
				b.WriteString(", and the time until each outbox partition delivered again")
			}
			b.WriteString(":\n\n| fault | lost | duplicates | recovery |")
			if r.sc.watch != nil {
				b.WriteString(" each partition |")
			}
			b.WriteString("\n|---|---:|---:|---:|")
			if r.sc.watch != nil {
				b.WriteString("---|")
			}
			b.WriteString("\n")
			for _, f := range r.report.Faults[:min(12, len(r.report.Faults))] {
				fmt.Fprintf(&b, "| %s | %d | %d | %s |", oneLine(f.What), f.Lost, f.Duplicates, dur(f.Recovery))
				if r.sc.watch != nil {
					fmt.Fprintf(&b, " %s |", perPartition(f.Partitions))
				}
				b.WriteString("\n")
			}
		}
		if len(r.appenders) > 0 {
			b.WriteString("\nThe appenders (\"unknown\" counts commits whose outcome they could not know; each was retried with its ID until confirmed):\n\n```\n")
			for _, l := range r.appenders {
				b.WriteString(l + "\n")
			}
			b.WriteString("```\n")
		}
		if len(r.relayLog) > 0 {
			b.WriteString("\nWhat the relays logged at WARN and ERROR (count, level, message):\n\n```\n")
			for _, l := range r.relayLog[:min(10, len(r.relayLog))] {
				fmt.Fprintf(&b, "%6d %-5s %s\n", l.N, l.Level, l.Msg)
			}
			b.WriteString("```\n")
		}
		if len(r.events) > 0 {
			b.WriteString("\nTimeline (partitions held per relay, sampled once a second; first 40 changes):\n\n```\n")
			for _, e := range r.events[:min(40, len(r.events))] {
				b.WriteString(e + "\n")
			}
			b.WriteString("```\n")
		}
	}
	return os.WriteFile(path, []byte(b.String()), 0o644)
}

const reportIntro = `# Reliability: the chaos suite

This file is written by the chaos harness (` + "`./scripts/chaos.sh`" + `, the program in
chaos/): do not edit it by hand; run the harness again.

The outbox promises at least once delivery, per-key order, duplicates
bounded by one batch per incident and recovery within a lease. The harness
checks those promises across real process crashes: it runs appenders,
` + "`outbox relay`" + ` processes, a Kafka broker (franz-go's kfake as a process of
its own) and, for the server faults, private PostgreSQL, Redis and MariaDB
servers and, for the NATS and RabbitMQ sinks, a private ` + "`nats-server -js`" + ` or
RabbitMQ node, all on 127.0.0.1; it injects one kind of fault per scenario, again and
again, while the appenders write and the relays relay; then it stops the
appenders, waits until the outbox is drained, reads every record the
broker holds and checks the histories (package chaos/history):

- appenders record an entry only after its commit returned success; an
  entry whose commit outcome is unknown (the connection died during
  COMMIT or EXEC) is recorded as unknown, retried with the same ID, and
  never counts as lost;
- lost: committed and never delivered (a parked entry counts as lost);
- duplicates: deliveries of an entry beyond its first, each attributed to
  the fault before it;
- order violations: a first delivery of a key's entry after a later entry
  of that key (per-key sequence numbers, in commit order);
- unexpected: a delivered entry nobody committed.

Two negative controls run through the same pipeline and must fail the
check: a relay that publishes its batches shuffled, and a sink that drops
0.1% of records while reporting them published. A control the checker
passes fails the run.

The inbox/ scenarios go one step further, to the consuming service:
consumer processes (` + "`chaos inbox-consumer`" + `, three of them in a Kafka
consumer group) apply every record through the inbox (package inbox, the
Kafka helper kafkainbox, and the PostgreSQL, MySQL or Redis inbox store)
into an effect table of their own, while consumers are SIGKILLed or
SIGSTOPped past their session, relays are SIGKILLed mid-publish and the
broker fails produce requests. The effects are then checked (package
chaos/internal/exactlyonce): every committed entry applied exactly once,
each key's effects in append order. Their negative control runs the same
faults with consumers without the inbox (offsets committed to Kafka after
each transaction): the check must find duplicates.

` + "`./scripts/chaos.sh -short`" + ` runs every scenario briefly as part of CI
(.ci/run); the full run (` + "`./scripts/chaos.sh -report docs/reliability.md`" + `)
wrote this file.

`
