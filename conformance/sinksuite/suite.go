package sinksuite

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/outboxrelay/outbox"
)

// Durations the suite uses against real brokers. Every wait for something
// that must happen polls (Harness.Read waits) with a generous deadline, so
// a slow machine makes the suite slower, not flaky.
const (
	// waitLimit bounds every wait for messages that must arrive, and for
	// a Publish that must return (after its context was cancelled, after
	// Close).
	waitLimit = 10 * time.Second
	// absentWait is how long the suite waits for messages that must not
	// arrive (written after Close, after a key's earlier entry failed)
	// before it concludes they did not.
	absentWait = time.Second
	// faultPublishTimeout is the deadline of a Publish during a fault that
	// does not stall: the sink must fail the entries by then (a sink that
	// retries until its context ends fails them semi-transient, which is
	// retryable).
	faultPublishTimeout = 15 * time.Second
	// stallPublishTimeout is the deadline of a Publish during a stall.
	stallPublishTimeout = 500 * time.Millisecond
	// landingSlack is how long the LandingBound case keeps watching
	// after the bound has passed.
	landingSlack = 2 * time.Second
	// caseTimeout is the watchdog of one case.
	caseTimeout = 90 * time.Second
)

// testCase is one named case of the suite.
type testCase struct {
	area, name string
	run        func(t *testing.T, s *env)
}

// Run runs the sink conformance suite against the sink and broker that
// newHarness makes. Every case is a parallel subtest named
// "Area/Behaviour" (for example "Publish/RoundTrip" or
// "KeyOrder/InterleavedKeys") with a fresh Harness of its own; the cases
// that run once per fault of the harness have one more level, named after
// the fault ("Errors/Classified/<fault>"). Cases that need something the
// sink or harness does not offer ([outbox.KeyOrderer] reporting true, an
// [outbox.LandingBounder] with a bound of 0 or more, a Close method, a
// PerEntry or Stalls fault) are skipped, saying so.
//
// The areas:
//
//   - Publish: round trip of ID, key, payload and headers (traceparent
//     and the key-sequence header among them), each message once; nil
//     means readable; one error per entry, in order; empty input;
//     input not retained; concurrent calls.
//   - KeyOrder: a sink that reports KeepsKeyOrder keeps each key's order
//     (many keys interleaved, concurrent calls), and a key's entries
//     after one that failed with a retryable error are neither reported
//     published nor written (after a permanent failure, only the order of
//     what was written is checked, as the [outbox.KeyOrderer] doc allows).
//   - Errors: for every fault of the harness, the entries it hits fail
//     with the declared class, a permanent error names what to
//     configure, and the same entries publish after the heal.
//   - Cancel: a cancelled context fails the entries not acknowledged,
//     promptly, with a retryable error.
//   - LandingBound: nothing lands later than the sink's LandingBound
//     after Publish returned.
//   - Close: Publish after Close fails every entry without panicking or
//     writing; Close twice is safe; Close keeps what a finished Publish
//     reported published; Close during concurrent Publish calls.
func Run(t *testing.T, newHarness NewHarness) {
	t.Helper()
	var cases []testCase
	cases = append(cases, publishCases()...)
	cases = append(cases, keyOrderCases()...)
	cases = append(cases, errorCases()...)
	cases = append(cases, closeCases()...)
	var areas []string
	byArea := map[string][]testCase{}
	for _, c := range cases {
		if _, ok := byArea[c.area]; !ok {
			areas = append(areas, c.area)
		}
		byArea[c.area] = append(byArea[c.area], c)
	}
	for _, a := range areas {
		t.Run(a, func(t *testing.T) {
			t.Parallel()
			for _, c := range byArea[a] {
				t.Run(c.name, func(t *testing.T) {
					t.Parallel()
					runCase(t, newHarness, c.run)
				})
			}
		})
	}
}

// runCase makes the case's harness and env and runs it.
func runCase(t *testing.T, newHarness NewHarness, run func(*testing.T, *env)) {
	s := newEnv(t, newHarness)
	run(t, s)
}

// newEnv makes a harness for t and the env around it.
func newEnv(t *testing.T, newHarness NewHarness) *env {
	t.Helper()
	suffix := randomSuffix()
	cfg := Config{Topic: "sinksuite-" + suffix}
	h := newHarness(t, cfg)
	if h == nil {
		t.Fatal("sinksuite: NewHarness returned a nil Harness; return one or fail t")
	}
	sink := h.Sink()
	if sink == nil {
		t.Fatal("sinksuite: Harness.Sink returned nil")
	}
	ctx, cancel := context.WithTimeout(t.Context(), caseTimeout)
	t.Cleanup(cancel)
	return &env{h: h, sink: sink, ctx: ctx, topic: cfg.Topic, prefix: suffix, newHarness: newHarness}
}

// env is what a case works with: the harness, its sink and the case's
// watchdog context.
type env struct {
	h          Harness
	sink       outbox.Sink
	ctx        context.Context
	topic      string
	prefix     string // unique per case, starts every entry ID
	seq        atomic.Int64
	newHarness NewHarness
}

func randomSuffix() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// traceparent returns a valid W3C traceparent header value, unique per
// call.
func traceparent() string {
	var trace [16]byte
	var span [8]byte
	_, _ = rand.Read(trace[:])
	_, _ = rand.Read(span[:])
	return "00-" + hex.EncodeToString(trace[:]) + "-" + hex.EncodeToString(span[:]) + "-01"
}

// entry returns a new entry of the case's topic with key (empty: no key),
// a payload that holds its ID, binary bytes and UTF-8, and headers: a
// traceparent, a header of the suite's own and, for a keyed entry, the
// per-key sequence header numbered seq.
func (s *env) entry(key string, seq int) outbox.Entry {
	n := s.seq.Add(1)
	id := fmt.Sprintf("%s-%06d", s.prefix, n)
	e := outbox.Entry{
		ID:      id,
		Topic:   s.topic,
		Key:     key,
		Payload: append([]byte("payload of "+id+" \x00\x01\xff é✓ "), byte(n)),
		Headers: map[string]string{
			"traceparent":     traceparent(),
			"x-sinksuite-seq": strconv.FormatInt(n, 10),
		},
	}
	if key != "" {
		e.Headers[outbox.HeaderKeySeq] = strconv.Itoa(seq)
	}
	return e
}

// keyed returns n entries of key, numbered 1..n.
func (s *env) keyed(key string, n int) []outbox.Entry {
	out := make([]outbox.Entry, n)
	for i := range out {
		out[i] = s.entry(key, i+1)
	}
	return out
}

// distinct returns n entries of n distinct keys.
func (s *env) distinct(n int) []outbox.Entry {
	out := make([]outbox.Entry, n)
	for i := range out {
		out[i] = s.entry(fmt.Sprintf("%s-k%d", s.prefix, s.seq.Load()+1), 1)
	}
	return out
}

// interleave returns the entries of keys round robin: the first of each,
// then the second of each, and so on.
func interleave(keys [][]outbox.Entry) []outbox.Entry {
	var out []outbox.Entry
	for i := 0; ; i++ {
		added := false
		for _, k := range keys {
			if i < len(k) {
				out = append(out, k[i])
				added = true
			}
		}
		if !added {
			return out
		}
	}
}

// cloneAll returns deep copies of entries.
func cloneAll(entries []outbox.Entry) []outbox.Entry {
	out := make([]outbox.Entry, len(entries))
	for i, e := range entries {
		out[i] = e.Clone()
	}
	return out
}
