package main

import (
	"regexp"
	"strings"
	"testing"
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
