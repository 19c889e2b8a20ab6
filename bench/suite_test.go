package main

import (
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/outboxrelay/outbox"
	"github.com/outboxrelay/outbox/backends/memory"
)

func TestPayloadRoundTrip(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ seq, keySeq int }{{0, 0}, {1, 7}, {99999, 123}, {1234567890, 42}} {
		b := payload(c.seq, c.keySeq)
		if len(b) != PayloadSize {
			t.Fatalf("payload(%d, %d) is %d bytes, want %d", c.seq, c.keySeq, len(b), PayloadSize)
		}
		seq, keySeq, err := parsePayload(b)
		if err != nil || seq != c.seq || keySeq != c.keySeq {
			t.Fatalf("parsePayload(payload(%d, %d)) = %d, %d, %v", c.seq, c.keySeq, seq, keySeq, err)
		}
	}
	if _, _, err := parsePayload([]byte("not ours")); err == nil {
		t.Fatal("parsePayload accepted a foreign body")
	}
}

func TestTrackerFindsLossDuplicatesForeignAndDisorder(t *testing.T) {
	t.Parallel()
	// Messages 0 and 1 are the first and second of key "a"; 2 is key "b";
	// 3 is lost; 4 is key "c".
	tr := newTracker(5)
	tr.markOrdered("a", payload(1, 1))
	tr.markOrdered("a", payload(0, 0)) // after its successor: disorder
	tr.markOrdered("b", payload(2, 0))
	tr.markOrdered("b", payload(2, 0)) // duplicate
	tr.markOrdered("c", payload(4, 0))
	tr.markPayload([]byte("foreign"))

	c := tr.counts_()
	if c.Delivered != 4 || c.Duplicates != 1 || c.Foreign != 1 || c.OrderViolations != 1 {
		t.Fatalf("counts = %+v, want 4 delivered, 1 duplicate, 1 foreign, 1 order violation", c)
	}
	err := c.check(false)
	if err == nil {
		t.Fatal("check passed wrong counts")
	}
	for _, want := range []string{"1 lost", "never sent", "duplicates", "order violations"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("check error %q does not mention %q", err, want)
		}
	}
	if err := (Counts{Expected: 2, Delivered: 2, Duplicates: 3}).check(true); err != nil {
		t.Errorf("duplicates allowed, yet check failed: %v", err)
	}
}

func TestTrackerAcceptsExactDelivery(t *testing.T) {
	t.Parallel()
	m := newMessages(100, 2)
	tr := newTracker(100)
	for i := range m.keys {
		tr.markOrdered(m.keys[i], m.payload[i])
	}
	select {
	case <-tr.done:
	default:
		t.Fatal("tracker not done after every message arrived")
	}
	if err := tr.counts_().check(false); err != nil {
		t.Fatal(err)
	}
}

func TestLanesKeepKeysTogetherInOrder(t *testing.T) {
	t.Parallel()
	m := newMessages(500, 3)
	owner := map[string]int{}
	for l, lane := range m.lanes(Callers) {
		last := map[string]int{}
		for _, i := range lane {
			k := m.keys[i]
			if o, ok := owner[k]; ok && o != l {
				t.Fatalf("key %s in lanes %d and %d", k, o, l)
			}
			owner[k] = l
			if p, ok := last[k]; ok && m.keySeq[i] <= p {
				t.Fatalf("lane %d: key %s out of order", l, k)
			}
			last[k] = m.keySeq[i]
		}
	}
}

func TestPercentileAndHuman(t *testing.T) {
	t.Parallel()
	v := []float64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
	if p := percentile(v, 50); p != 5 {
		t.Errorf("p50 = %v, want 5", p)
	}
	if p := percentile(v, 100); p != 10 {
		t.Errorf("p100 = %v, want 10", p)
	}
	for n, want := range map[int]string{1000000: "1M", 10000: "10k", 2000: "2k", 1234: "1234"} {
		if got := human(n); got != want {
			t.Errorf("human(%d) = %q, want %q", n, got, want)
		}
	}
}

func TestRawOnRetargetsEveryRawStatement(t *testing.T) {
	t.Parallel()
	for _, q := range []string{rawTableDDL, rawInsertMany, rawClaimDelete} {
		got := rawOn(q, schemaRawBig+".entries")
		if strings.Contains(got, schemaRaw+".entries") || !strings.Contains(got, schemaRawBig+".entries") {
			t.Errorf("rawOn left the W1/W2 table in, or did not put the W4 one in:\n%s", got)
		}
	}
}

func TestRawBacklogSelectedLikeOurW4(t *testing.T) {
	t.Parallel()
	names := map[string]bool{}
	for _, w := range (&Suite{}).workloads() {
		names[w.name] = true
	}
	for _, n := range []string{"raw/postgres W4 backlog", "raw/redis W4 backlog"} {
		if !names[n] {
			t.Fatalf("no workload %q", n)
		}
		for _, c := range []struct {
			only, skip string
			want       bool
		}{{"raw", "", true}, {"raw|outbox", "", true}, {"W4", "", true}, {"raw", "W4", false}, {"river", "", false}} {
			s := &Suite{}
			if c.only != "" {
				s.cfg.Only = regexp.MustCompile(c.only)
			}
			if c.skip != "" {
				s.cfg.Skip = regexp.MustCompile(c.skip)
			}
			if got := s.selected(n); got != c.want {
				t.Errorf("-only %q -skip %q: selected(%q) = %v, want %v", c.only, c.skip, n, got, c.want)
			}
		}
	}
}

func TestOnlyPicksPartsOfOurWorkloads(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		only, skip string
		workload   string
		want       bool
		subs       []string // the parts of workload that run
	}{
		{"W5", "", "outbox/postgres", true, []string{"postgres W5 relays", "postgres W5 relays fleet"}},
		{"W5", "", "outbox/redis", true, []string{"redis W5 relays", "redis W5 relays fleet"}},
		{"W5", "", "river", false, nil},
		{"fleet", "", "outbox/redis", true, []string{"redis W5 relays fleet"}},
		{"postgres W5", "", "outbox/redis", false, nil},
		{"outbox/redis", "", "outbox/redis", true, []string{"redis W1+W2 append and drain", "redis W3 latency", "redis W4 backlog", "redis W5 relays", "redis W5 relays fleet", "redis W6 poison", "redis W7 hot key"}},
		{"poison", "", "outbox/postgres", true, []string{"postgres W6 poison"}},
		{"hot key", "", "outbox/redis", true, []string{"redis W7 hot key"}},
		{"W5", "fleet", "outbox/redis", true, []string{"redis W5 relays"}},
		{"W5", "outbox/redis", "outbox/redis", false, nil},
	} {
		s := &Suite{}
		if c.only != "" {
			s.cfg.Only = regexp.MustCompile(c.only)
		}
		if c.skip != "" {
			s.cfg.Skip = regexp.MustCompile(c.skip)
		}
		if got := s.selectedWorkload(workload{name: c.workload}); got != c.want {
			t.Errorf("-only %q -skip %q: selectedWorkload(%q) = %v, want %v", c.only, c.skip, c.workload, got, c.want)
		}
		if !c.want {
			continue
		}
		backend := strings.TrimPrefix(c.workload, "outbox/")
		var subs []string
		for _, sub := range s.oursSubs(backend) {
			if s.oursSelected(backend, sub) {
				subs = append(subs, sub)
			}
		}
		if strings.Join(subs, "|") != strings.Join(c.subs, "|") {
			t.Errorf("-only %q -skip %q: %s runs %q, want %q", c.only, c.skip, c.workload, subs, c.subs)
		}
	}
}

func TestLeaseLedgerCountsTakeoversWithoutRelease(t *testing.T) {
	t.Parallel()
	lg := newLeaseLedger()
	lease := func(p int, owner string, v int64) outbox.Lease {
		return outbox.Lease{Partition: p, Owner: owner, Version: v}
	}
	// A first lease, released, then taken by another relay: clean.
	lg.acquired(lease(0, "a", 1))
	lg.released(lease(0, "a", 1))
	lg.acquired(lease(0, "b", 2))
	// A release of a lease no longer current changes nothing.
	lg.released(lease(0, "a", 1))
	if n := lg.takeoverCount(); n != 0 {
		t.Fatalf("takeovers = %d after clean handovers, want 0", n)
	}
	// b's lease expires and c takes it: one takeover.
	lg.acquired(lease(0, "c", 3))
	// c abandons it and takes it again at the same version, then releases
	// and acquires once more: one more takeover, then a clean one.
	lg.acquired(lease(0, "c", 3))
	lg.released(lease(0, "c", 3))
	lg.acquired(lease(0, "c", 4))
	// A release that failed is taken back.
	undo := lg.released(lease(0, "c", 4))
	undo()
	lg.acquired(lease(0, "d", 5))
	if n := lg.takeoverCount(); n != 3 {
		t.Fatalf("takeovers = %d, want 3", n)
	}
	lg.acquired(lease(1, "d", 1))
	lg.acquired(lease(2, "e", 1))
	if got := lg.heldBy("d"); len(got) != 2 || got[0] != 0 || got[1] != 1 {
		t.Fatalf("heldBy(d) = %v, want [0 1]", got)
	}
}

func TestTargetsTableJudgesBoundsInTheirUnit(t *testing.T) {
	t.Parallel()
	s := &Suite{}
	for _, r := range []*Result{
		{Key: "ours.pg.fleet.spread.min", Unit: "partitions", Runs: []float64{4}, Median: 4},
		{Key: "ours.pg.fleet.spread.max", Unit: "partitions", Runs: []float64{5}, Median: 5},
		{Key: "ours.pg.fleet.fetches", Unit: "fetches/append", Runs: []float64{1.5}, Median: 1.5},
		{Key: "ours.pg.fleet.recovery", Unit: "ms", Runs: []float64{3500}, Median: 3500},
	} {
		s.results = append(s.results, r)
	}
	table := s.markdownTables()
	for _, want := range []string{
		"fewest partitions per relay, converged | 4.00 partitions | — | — | 4.00 partitions | ≥ 5 partitions | **no** |",
		"most partitions per relay, converged | 5.00 partitions | — | — | 5.00 partitions | ≤ 5 partitions | yes |",
		"PollInterval 1 h | 1.50 fetches/append | — | — | 1.50 fetches/append | ≤ 1.1 fetches/append | **no** |",
		"(LeaseTTL 3 s) | 3.5k ms | — | — | 3500.00 ms | ≤ 4000 ms | yes |",
	} {
		if !strings.Contains(table, want) {
			t.Errorf("the targets table has no row ending %q", want)
		}
	}
}

func TestFleetBoundsDuplicatesByTakeoversTimesBatch(t *testing.T) {
	t.Parallel()
	b := memory.New(memory.Options{Partitions: 4})
	defer b.Close()
	f, err := newFleet(b, countSink{newTracker(1)}, 2, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	f.ledger.acquired(outbox.Lease{Partition: 0, Owner: "a", Version: 1})
	f.ledger.acquired(outbox.Lease{Partition: 0, Owner: "b", Version: 2}) // a's lease expired, b took it
	ok := Counts{Expected: 10, Delivered: 10, Duplicates: 500}
	if err := f.check(ok); err != nil {
		t.Errorf("one takeover, 500 duplicates (one default batch): %v", err)
	}
	over := ok
	over.Duplicates = 501
	if err := f.check(over); err == nil {
		t.Error("one takeover, 501 duplicates: no error")
	}
}

func TestJudgeProbeAppliesTheSustainableRule(t *testing.T) {
	t.Parallel()
	// At 10,000/s, probeGrowth (20 ms) is 200 entries of arrivals and
	// probeCeiling (100 ms) 1,000.
	const asked = 10000
	for _, c := range []struct {
		name     string
		achieved float64
		backlog  []int64
		ok       bool
		why      string
	}{
		{"SteadyBacklogPasses", 10000, []int64{50, 80, 60, 70, 40, 90, 60, 50, 70}, true, ""},
		{"BacklogShrinkingPasses", 9900, []int64{900, 800, 700, 300, 200, 100, 50, 40, 30}, true, ""},
		{"SlowArrivalsFail", 9400, []int64{5, 5, 5, 5, 5, 5, 5, 5, 5}, false, "arrivals 94%"},
		{"GrowingBacklogFails", 10000, []int64{100, 120, 140, 300, 350, 400, 450, 500, 520}, false, "backlog grew"},
		{"GrowthWithinTheSlackPasses", 10000, []int64{100, 100, 100, 200, 200, 200, 290, 300, 300}, true, ""},
		{"BacklogOverTheCeilingFails", 10000, []int64{1000, 1100, 900, 1000, 1050, 950, 1000, 1001, 990}, false, "backlog reached 1001"},
		{"TooFewSamplesFail", 10000, []int64{0, 0}, false, "fewer than 3"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			v := judgeProbe(asked, c.achieved, c.backlog)
			if v.ok != c.ok {
				t.Fatalf("ok = %v (%s), want %v", v.ok, v, c.ok)
			}
			if c.why != "" && !strings.Contains(strings.Join(v.why, "; "), c.why) {
				t.Errorf("why = %q, want it to mention %q", v.why, c.why)
			}
		})
	}
}

func TestSearchRateDoublesThenBisects(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name      string
		limit     float64 // the highest rate the fake system sustains
		steps     int
		want      float64
		wantProbe []float64
		wantErr   bool
	}{
		{"BisectsBetweenLastPassAndFirstFailure", 27000, 3, 26000, []float64{1000, 2000, 4000, 8000, 16000, 32000, 24000, 28000, 26000}, false},
		{"NoBisectionStepsKeepsTheLastDoubling", 27000, 0, 16000, []float64{1000, 2000, 4000, 8000, 16000, 32000}, false},
		{"StopsAtTheTop", 5e6, 3, 1024000, nil, false},
		{"BisectsBelowTheStartWhenItFails", 700, 2, 500, []float64{1000, 500, 800}, false},
		{"FailsWhenNothingPasses", 10, 2, 0, []float64{1000, 500, 300}, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			var probed []float64
			got, err := searchRate(1000, 1024000, c.steps, func(r float64) (bool, error) {
				probed = append(probed, r)
				return r <= c.limit, nil
			})
			if (err != nil) != c.wantErr {
				t.Fatalf("err = %v, want an error: %v", err, c.wantErr)
			}
			if got != c.want {
				t.Errorf("rate = %v, want %v", got, c.want)
			}
			if c.wantProbe != nil && !slices.Equal(probed, c.wantProbe) {
				t.Errorf("probed %v, want %v", probed, c.wantProbe)
			}
		})
	}
}

func TestTargetsTableJudgesRatioUpperBounds(t *testing.T) {
	t.Parallel()
	s := &Suite{}
	s.results = []*Result{
		{Key: "ours.pg.lat.wake.p99", System: "outbox/postgres p99", Unit: "ms", Runs: []float64{4}, Median: 4},
		{Key: "river.lat.pg.half.p99", System: "River p99", Unit: "ms", Runs: []float64{40}, Median: 40},
		{Key: "ours.redis.lat.wake.p99", System: "outbox/redis p99", Unit: "ms", Runs: []float64{3}, Median: 3},
		{Key: "river.lat.redis.half.p99", System: "River p99", Unit: "ms", Runs: []float64{10}, Median: 10},
	}
	table := s.markdownTables()
	for _, want := range []string{
		"half of the Postgres sustainable rate | 4.00 ms | River p99 40.0 ms | 0.10× |  | ≤ 0.2× | yes |",
		"half of the Redis sustainable rate | 3.00 ms | River p99 10.0 ms | 0.30× |  | ≤ 0.2× | **no** |",
		"Postgres commit-to-sink p99, half of the sustainable rate, wake-ups | 4.00 ms | — | — | 4.00 ms | ≤ 10 ms | yes |",
	} {
		if !strings.Contains(table, want) {
			t.Errorf("the targets table has no row ending %q", want)
		}
	}
}

func TestRiverW3GoesWithOurW3(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		only, skip string
		want       bool
	}{
		{"", "", true},
		{"W3", "", true},
		{"river", "", true},
		{"postgres W3", "", true},
		{"redis W3", "", true},
		{"W3", "river", false},
		{"postgres W3", "outbox/postgres", false},
		{"outbox/postgres", "", false},
		{"W5", "", false},
	} {
		s := &Suite{}
		if c.only != "" {
			s.cfg.Only = regexp.MustCompile(c.only)
		}
		if c.skip != "" {
			s.cfg.Skip = regexp.MustCompile(c.skip)
		}
		if got := s.selectedWorkload(workload{name: riverW3Name}); got != c.want {
			t.Errorf("-only %q -skip %q: selectedWorkload(%q) = %v, want %v", c.only, c.skip, riverW3Name, got, c.want)
		}
	}
}

func TestFmtRatioKeepsSmallRatiosReadable(t *testing.T) {
	t.Parallel()
	for r, want := range map[float64]string{0: "0.00", 0.0077: "0.0077", 0.012: "0.012", 0.1: "0.10", 0.856: "0.86", 2.5: "2.50"} {
		if got := fmtRatio(r); got != want {
			t.Errorf("fmtRatio(%v) = %q, want %q", r, got, want)
		}
	}
}
