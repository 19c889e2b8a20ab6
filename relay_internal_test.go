package outbox

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestPlanRounds(t *testing.T) {
	t.Parallel()
	batch := func(keys ...string) []Entry {
		out := make([]Entry, len(keys))
		for i, k := range keys {
			// "a/x" is key a of topic x; the topic defaults to t.
			topic := "t"
			if j := strings.IndexByte(k, '/'); j >= 0 {
				k, topic = k[:j], k[j+1:]
			}
			out[i] = Entry{ID: fmt.Sprint(i), Key: k, Topic: topic}
		}
		return out
	}
	show := func(rounds [][]Entry) []string {
		var out []string
		for _, r := range rounds {
			s := ""
			for _, e := range r {
				s += e.Key + e.ID + " "
			}
			out = append(out, s)
		}
		return out
	}
	for _, tc := range []struct {
		name      string
		batch     []Entry
		unordered bool
		keyOrder  bool
		max       int
		want      []string
	}{
		{"empty", nil, false, false, 10, nil},
		{"one key is sequential", batch("a", "a", "a"), false, false, 10, []string{"a0 ", "a1 ", "a2 "}},
		{"keys interleave", batch("a", "b", "a", "c", "b", "a"), false, false, 10, []string{"a0 b1 c3 ", "a2 b4 ", "a5 "}},
		{"keyless go first, together", batch("", "a", "", "a"), false, false, 10, []string{"0 a1 2 ", "a3 "}},
		{"rounds split at max in flight", batch("a", "b", "c", "d", "e"), false, false, 2, []string{"a0 b1 ", "c2 d3 ", "e4 "}},
		{"unordered is one round", batch("a", "a", "a"), true, false, 10, []string{"a0 a1 a2 "}},
		{"unordered splits too", batch("a", "a", "a"), true, false, 2, []string{"a0 a1 ", "a2 "}},
		{"key order: one key is one round", batch("a", "a", "a"), false, true, 10, []string{"a0 a1 a2 "}},
		{"key order: keys interleave in one round", batch("a", "b", "a", "", "b"), false, true, 10, []string{"a0 b1 a2 3 b4 "}},
		{"key order: a topic change starts a new round", batch("a", "a/x", "a/x", "b", "a", "b/x"), false, true, 10, []string{"a0 b3 ", "a1 a2 b5 ", "a4 "}},
		{"key order: split at max in flight, in order", batch("a", "a", "a", "a", "a"), false, true, 2, []string{"a0 a1 ", "a2 a3 ", "a4 "}},
	} {
		if got := show(planRounds(tc.batch, tc.unordered, tc.keyOrder, tc.max)); !slices.Equal(got, tc.want) {
			t.Errorf("%s: rounds = %q, want %q", tc.name, got, tc.want)
		}
	}
}

func TestBreaker(t *testing.T) {
	t.Parallel()
	now := time.Unix(1000, 0)
	b := breaker{threshold: 2, cooldown: time.Minute}
	var st streak
	if ok, probe := b.allow(now); !ok || probe {
		t.Fatal("a fresh breaker must be closed")
	}
	b.record(false, now, &st)
	if ok, _ := b.allow(now); !ok {
		t.Fatal("one failure below the threshold must not open it")
	}
	b.record(false, now, &st)
	if ok, _ := b.allow(now.Add(59 * time.Second)); ok {
		t.Fatal("two failures must open it for the cooldown")
	}
	if w := b.wait(now.Add(30 * time.Second)); w != 30*time.Second {
		t.Fatalf("wait = %v, want 30s", w)
	}
	ok, probe := b.allow(now.Add(time.Minute))
	if !ok || !probe {
		t.Fatal("after the cooldown one probe must pass")
	}
	if ok, _ := b.allow(now.Add(time.Minute)); ok {
		t.Fatal("only one probe at a time")
	}
	b.record(false, now.Add(time.Minute), &st)
	if ok, _ := b.allow(now.Add(time.Minute + time.Second)); ok {
		t.Fatal("a failed probe must reopen it")
	}
	// A probe that never reports back is replaced after a cooldown.
	if ok, _ := b.allow(now.Add(2 * time.Minute)); !ok {
		t.Fatal("probe after the second cooldown")
	}
	if ok, _ := b.allow(now.Add(3*time.Minute + time.Second)); !ok {
		t.Fatal("an abandoned probe must be replaced")
	}
	b.record(true, now.Add(3*time.Minute), &st)
	if ok, probe := b.allow(now.Add(3 * time.Minute)); !ok || probe {
		t.Fatal("a successful probe must close it")
	}
	// The threshold counts one worker's failed rounds in a row: other
	// workers' failures in between do not add up, and a success of any
	// worker starts every run again.
	c := breaker{threshold: 3, cooldown: time.Minute}
	var w1, w2 streak
	c.record(false, now, &w1)
	c.record(false, now, &w2)
	c.record(false, now, &w1)
	c.record(false, now, &w2)
	if ok, _ := c.allow(now); !ok {
		t.Fatal("two failed rounds of each of two workers must not open a threshold-3 breaker")
	}
	c.record(true, now, &w2)
	c.record(false, now, &w1)
	if ok, _ := c.allow(now); !ok {
		t.Fatal("a success must start the run of every worker again")
	}
	c.record(false, now, &w1)
	c.record(false, now, &w1)
	if ok, _ := c.allow(now); ok {
		t.Fatal("three failed rounds of one worker in a row must open it")
	}
	off := breaker{threshold: -1}
	for range 10 {
		off.record(false, now, &st)
	}
	if ok, _ := off.allow(now); !ok {
		t.Fatal("a disabled breaker never opens")
	}
}

func TestTruncateKeepsUTF8Whole(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		s    string
		n    int
		want string
	}{
		{"short", 10, "short"},
		{"abcdef", 3, "abc"},
		{"aé", 2, "a"}, // é is 2 bytes: cutting inside it drops it
		{"日本", 4, "日"}, // 3-byte runes
		{"日本", 6, "日本"},
	} {
		if got := TruncateUTF8(tc.s, tc.n); got != tc.want {
			t.Errorf("TruncateUTF8(%q, %d) = %q, want %q", tc.s, tc.n, got, tc.want)
		}
	}
}

// withDefaults gives every zero option its exported default.
func TestWithDefaultsAppliesTheExportedDefaults(t *testing.T) {
	t.Parallel()
	o := RelayOptions{}.withDefaults()
	for _, c := range []struct {
		name      string
		got, want any
	}{
		{"BatchSize", o.BatchSize, DefaultBatchSize},
		{"MaxInFlight", o.MaxInFlight, DefaultMaxInFlight},
		{"PollInterval", o.PollInterval, DefaultPollInterval},
		{"LeaseTTL", o.LeaseTTL, DefaultLeaseTTL},
		{"RenewMargin", o.RenewMargin, DefaultLeaseTTL / 3},
		{"AcquireInterval", o.AcquireInterval, DefaultLeaseTTL / 3},
		{"BreakerThreshold", o.BreakerThreshold, DefaultBreakerThreshold},
		{"BreakerCooldown", o.BreakerCooldown, DefaultBreakerCooldown},
		{"BackpressureScale", o.BackpressureScale, float64(DefaultBackpressureScale)},
		{"StatsInterval", o.StatsInterval, DefaultStatsInterval},
	} {
		if c.got != c.want {
			t.Errorf("%s = %v, want %v", c.name, c.got, c.want)
		}
	}
	if o.Owner == "" || o.Logger == nil || o.MeterProvider == nil || o.TracerProvider == nil || o.Now == nil {
		t.Errorf("Owner, Logger, MeterProvider, TracerProvider and Now must be set: %+v", o)
	}
	if scaled := (RelayOptions{BackpressureScale: 0.5}).withDefaults().BackpressureScale; scaled != DefaultBackpressureScale {
		t.Errorf("BackpressureScale 0.5 becomes %v, want the default %v", scaled, float64(DefaultBackpressureScale))
	}
}
