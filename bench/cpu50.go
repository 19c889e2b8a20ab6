package main

import (
	"context"
	"fmt"
	"math"
)

// The latency point at about 50% CPU (issue 32, item 7). At W3's half and
// quarter points the raw appenders alone keep both cores over 90% busy,
// so the p99 there is a wait for a core. This point is the arrival rate
// at which the raw appenders alone (rawAppendRun: the same 32 key-affine
// callers, plain BEGIN+INSERT+COMMIT, no outbox, no relay) keep the
// machine about cpu50Target% busy by the same /proc/stat measurement; at
// that rate, in the same round, it measures our Postgres and Redis
// commit-to-sink latency (wake-ups) and River's commit-to-work latency.

const (
	// cpu50Name is the workload's name, which -only and -skip match.
	cpu50Name = "W3 cpu50 point"
	// cpu50Target is the machine CPU busy (%) the search aims at, and
	// cpu50Tolerance how far from it a probe may land and be taken.
	cpu50Target, cpu50Tolerance = 50.0, 5.0
	// cpu50From is the search's first rate (entries/s), cpu50UpTo its
	// highest.
	cpu50From, cpu50UpTo = 1000.0, 256000.0
	// cpu50Steps bounds the bisection steps after the doubling.
	cpu50Steps = 4
	// cpu50P99 is the p99 target (ms) on Postgres and Redis, and
	// cpu50RiverRatio the most our p99 may be of River's.
	cpu50P99, cpu50RiverRatio = 10.0, 0.05
)

// cpu50Rule is the note of the point's rate.
var cpu50Rule = fmt.Sprintf("the rate at which the raw appenders alone keep the machine %.0f±%.0f%% busy: from %.0f/s doubling until a probe passes %.0f%%, then bisecting; the probe nearest %.0f%% if none lands in the band", cpu50Target, cpu50Tolerance, cpu50From, cpu50Target, cpu50Target)

// busyProbe is one probe of the search: a rate and the machine CPU busy
// (%) the raw appenders caused at it.
type busyProbe struct{ rate, busy float64 }

// searchBusy returns the rate (and its probe) at which measure reports a
// machine CPU busy within tol of target: it probes from, 2×from, … until
// a probe is above target (or upTo is reached), then bisects steps times
// between the last probe below and the first above (midpoints rounded to
// 100/s), stopping at the first probe within tol. When none lands within
// tol it returns the probe nearest target (of two as near, the higher
// rate below target, the lower above it). It fails when measure fails or
// reports no reading (a negative busy).
func searchBusy(from, upTo, target, tol float64, steps int, measure func(rate float64) (float64, error)) (busyProbe, []busyProbe, error) {
	var probes []busyProbe
	try := func(r float64) (busyProbe, error) {
		b, err := measure(r)
		if err != nil {
			return busyProbe{}, err
		}
		if b < 0 {
			return busyProbe{}, fmt.Errorf("no CPU reading at %.0f/s (/proc/stat unreadable)", r)
		}
		p := busyProbe{r, b}
		probes = append(probes, p)
		return p, nil
	}
	near := func(p busyProbe) bool { return math.Abs(p.busy-target) <= tol }
	lo, hi := 0.0, 0.0
	for r := from; r <= upTo; r *= 2 {
		p, err := try(r)
		if err != nil {
			return busyProbe{}, probes, err
		}
		if near(p) {
			return p, probes, nil
		}
		if p.busy > target {
			hi = r
			break
		}
		lo = r
	}
	for i := 0; i < steps && hi > 0; i++ {
		mid := math.Round((lo+hi)/2/100) * 100
		if mid <= lo || mid >= hi {
			break
		}
		p, err := try(mid)
		if err != nil {
			return busyProbe{}, probes, err
		}
		if near(p) {
			return p, probes, nil
		}
		if p.busy > target {
			hi = mid
		} else {
			lo = mid
		}
	}
	best := probes[0]
	for _, p := range probes[1:] {
		d, bd := math.Abs(p.busy-target), math.Abs(best.busy-target)
		tie := d == bd && (p.busy < target && p.rate > best.rate || p.busy > target && p.rate < best.rate)
		if d < bd || tie {
			best = p
		}
	}
	return best, probes, nil
}

// cpu50 runs the point for one round: the search, the raw appenders at
// the rate found for a whole W3 run, then ours on Postgres and Redis and
// River, each at that rate.
func (s *Suite) cpu50(ctx context.Context) error {
	found, probes, err := searchBusy(cpu50From, cpu50UpTo, cpu50Target, cpu50Tolerance, cpu50Steps, func(r float64) (float64, error) {
		n := max(1, int(r*s.cfg.ProbeD.Seconds()))
		rr, err := s.rawAppendRun(ctx, n, r, s.cfg.ProbeD)
		if err != nil {
			return 0, err
		}
		s.logf("   W3 cpu50 probe %7.0f/s: raw appenders alone, machine busy %.1f%%", r, rr.busy)
		return rr.busy, nil
	})
	if err != nil {
		return fmt.Errorf("the 50%% CPU search: %w", err)
	}
	s.logf("   W3 cpu50: %.0f/s (machine busy %.1f%% in its probe; %d probes)", found.rate, found.busy, len(probes))
	if math.Abs(found.busy-cpu50Target) > cpu50Tolerance {
		s.logf("   W3 cpu50: WARNING: no probe kept the machine %.0f±%.0f%% busy; the nearest, %.1f%% at %.0f/s, is taken (other processes busy on the machine?)", cpu50Target, cpu50Tolerance, found.busy, found.rate)
	}
	arr := found.rate
	n := min(s.cfg.LatencyN, int(arr*s.cfg.LatencyD.Seconds()))
	w := func(system string, r float64) string {
		return fmt.Sprintf("%s commit-to-sink at about %.0f%% CPU, %.0f/s (the raw appenders alone keep the machine %.0f±%.0f%% busy)", system, cpu50Target, r, cpu50Target, cpu50Tolerance)
	}
	note := fmt.Sprintf("at most %d entries or %s per run", n, s.cfg.LatencyD)

	// The raw appenders alone, a whole run at the rate found.
	rate, rawGot, rawBusy := s.sr("raw.pg.cpu50.asked"), s.sr("raw.pg.cpu50.rate"), s.sr("raw.pg.cpu50.busy")
	rr, err := s.rawAppendRun(ctx, n, arr, s.cfg.LatencyD)
	if err != nil {
		return fmt.Errorf("raw appenders at %.0f/s: %w", arr, err)
	}
	rate.add(arr, nil)
	rawGot.add(rr.achieved, &rr.counts)
	if rr.busy >= 0 {
		rawBusy.add(rr.busy, nil)
	}
	title := w("Postgres", rate.median())
	const rawSys = "raw appenders alone (pgx BEGIN+INSERT+COMMIT, no outbox, no relay)"
	s.record("raw.pg.cpu50.asked", title, rawSys+" arrivals asked", "entries/s", true, rate, cpu50Rule)
	s.record("raw.pg.cpu50.rate", title, rawSys+" arrivals achieved", "entries/s", true, rawGot, fmt.Sprintf("the same %d callers and arrivals; counts: rows in the table", latCallers))
	s.record("raw.pg.cpu50.busy", title, rawSys+" machine CPU busy", "%", false, rawBusy, "all cores, a whole run at the rate found (/proc/stat)")

	for _, t := range []target{s.postgresTarget(), s.redisTarget()} {
		if err := s.cpu50Ours(ctx, t, n, arr, w(t.title, rate.median()), note); err != nil {
			return err
		}
	}
	return s.cpu50River(ctx, n, arr, fmt.Sprintf("River commit-to-work at about %.0f%% CPU (the Postgres point), %.0f/s", cpu50Target, rate.median()), note)
}

// cpu50Ours measures one of our backends at the point: n arrivals at arr
// per second, one relay with the backend's wake-ups.
func (s *Suite) cpu50Ours(ctx context.Context, t target, n int, arr float64, w, note string) error {
	prefix := "ours." + t.key + ".lat.cpu50"
	asked, got, perTx := s.sr(prefix+".asked"), s.sr(prefix+".rate"), s.sr(prefix+".pertx")
	p50, p99, pmax, busy := s.sr(prefix+".p50"), s.sr(prefix+".p99"), s.sr(prefix+".max"), s.sr(prefix+".busy")
	in, err := t.open(ctx, 1)
	if err != nil {
		return err
	}
	res, err := s.latencyRun(ctx, t, in, in.store, s.noopCarrier, n, arr, s.cfg.LatencyD)
	in.close()
	if err != nil {
		s.fail("outbox/%s W3 cpu50 run %d: %v", t.name, s.run+1, err)
		return nil
	}
	res.add(arr, asked, got, perTx, p50, p99, pmax, busy)
	recordLatency(s, prefix, w, "outbox/"+t.name+" (wake-ups)", note, asked, got, perTx, p50, p99, pmax, busy)
	return nil
}

// cpu50River measures River at the point, with its W3 settings.
func (s *Suite) cpu50River(ctx context.Context, n int, arr float64, w, note string) error {
	if err := s.resetRiver(ctx); err != nil {
		return fmt.Errorf("river migrate: %w", err)
	}
	defer func() {
		if _, err := s.pool.Exec(context.WithoutCancel(ctx), "DROP SCHEMA IF EXISTS "+schemaRiver+" CASCADE"); err != nil {
			s.logf("cleanup: dropping schema %s: %v", schemaRiver, err)
		}
	}()
	const prefix = "river.lat.cpu50"
	asked, got, perTx := s.sr(prefix+".asked"), s.sr(prefix+".rate"), s.sr(prefix+".pertx")
	p50, p99, pmax, busy := s.sr(prefix+".p50"), s.sr(prefix+".p99"), s.sr(prefix+".max"), s.sr(prefix+".busy")
	res, err := s.riverLatencyRun(ctx, n, arr, s.cfg.LatencyD)
	if err != nil {
		s.fail("river W3 cpu50 run %d: %v", s.run+1, err)
		return nil
	}
	res.add(arr, asked, got, perTx, p50, p99, pmax, busy)
	recordLatency(s, prefix, w, "River", note+"; "+riverW3Settings, asked, got, perTx, p50, p99, pmax, busy)
	return nil
}

// cpu50Comparisons are the point's rows of the targets table.
func cpu50Comparisons() []comparison {
	const at = "at about 50% CPU (the rate at which the raw appenders alone keep the machine 50±5% busy)"
	return []comparison{
		{group: "Postgres commit-to-sink p99 " + at + ", wake-ups", ours: "ours.pg.lat.cpu50.p99", abs: cpu50P99},
		{group: "Redis commit-to-sink p99 " + at + ", wake-ups", ours: "ours.redis.lat.cpu50.p99", abs: cpu50P99},
		{group: "Postgres commit-to-sink p99 vs River's commit-to-work p99, same arrivals, " + at, ours: "ours.pg.lat.cpu50.p99", other: "river.lat.cpu50.p99", atMost: cpu50RiverRatio},
		{group: "Redis commit-to-sink p99 vs River's commit-to-work p99, same arrivals, " + at, ours: "ours.redis.lat.cpu50.p99", other: "river.lat.cpu50.p99", atMost: cpu50RiverRatio},
		{group: "~50% CPU point, machine CPU busy: Postgres appenders and relay vs the raw inserts alone (same arrivals)", ours: "ours.pg.lat.cpu50.busy", other: "raw.pg.cpu50.busy"},
		{group: "~50% CPU point: arrival rate", ours: "raw.pg.cpu50.asked"},
	}
}
