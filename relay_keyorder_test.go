package outbox_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/outboxrelay/outbox"
	"github.com/outboxrelay/outbox/backends/memory"
	"github.com/outboxrelay/outbox/backoff"
)

// orderedSink is a sink that keeps per-key order within a call
// (outbox.KeyOrderer), as Kafka's idempotent producer does for a
// partition: once an entry of a key fails, the later entries of that key
// in the call fail too and are not written. With lies set it breaks that
// promise: it reports the later entries written (and writes them).
type orderedSink struct {
	mu       sync.Mutex
	fail     func(e outbox.Entry, attempt int) error
	lies     bool
	attempts map[string]int
	written  []outbox.Entry // every write, in order
	maxKey   int            // most entries of one key in one call
}

func (s *orderedSink) KeepsKeyOrder() bool { return true }

func (s *orderedSink) Publish(ctx context.Context, msgs []outbox.Entry) []error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.attempts == nil {
		s.attempts = map[string]int{}
	}
	errs := make([]error, len(msgs))
	failed := map[string]bool{}
	perKey := map[string]int{}
	for i, m := range msgs {
		perKey[m.Key]++
		s.maxKey = max(s.maxKey, perKey[m.Key])
		s.attempts[m.ID]++
		if failed[m.Key] && !s.lies {
			errs[i] = errors.New("an earlier record of the partition failed")
			continue
		}
		if s.fail != nil {
			errs[i] = s.fail(m, s.attempts[m.ID])
		}
		if errs[i] != nil {
			if backoff.ClassOf(errs[i]) != backoff.ClassPermanent {
				failed[m.Key] = true
			}
			continue
		}
		s.written = append(s.written, m)
	}
	return errs
}

func (s *orderedSink) snapshot() []outbox.Entry {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.written)
}

// sentLog is the memory backend with a log of the IDs MarkSent recorded,
// in order.
type sentLog struct {
	*memory.Backend
	mu   sync.Mutex
	sent []string
}

func (s *sentLog) MarkSent(ctx context.Context, l outbox.Lease, ids []string) error {
	err := s.Backend.MarkSent(ctx, l, ids)
	if err == nil {
		s.mu.Lock()
		s.sent = append(s.sent, ids...)
		s.mu.Unlock()
	}
	return err
}

func (s *sentLog) snapshot() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.sent)
}

// TestRelayPublishesAHotKeyManyPerCallAndKeepsItsOrder: with a sink that
// keeps per-key order, a key's entries go to the sink many per call; with
// failures (transient ones, a permanent one), each key's entries are
// recorded sent exactly once and in append order, and, with a sink that
// keeps its promise, written for the first time in append order. A sink
// that reports later entries of a failed key as written anyway is not
// trusted: those are written again after the failed entry.
func TestRelayPublishesAHotKeyManyPerCallAndKeepsItsOrder(t *testing.T) {
	for _, lies := range []bool{false, true} {
		t.Run(fmt.Sprintf("lies=%v", lies), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				b := &sentLog{Backend: memory.New(memory.Options{Partitions: 2})}
				seq := map[string]int{}
				var entries []outbox.Entry
				for i := range 400 {
					id := fmt.Sprintf("e%03d", i)
					seq[id] = i
					key := "hot"
					if i%4 == 3 {
						key = fmt.Sprintf("k%d", i%3)
					}
					entries = append(entries, outbox.Entry{ID: id, Topic: "t", Key: key})
				}
				for i := 0; i < len(entries); i += 100 {
					appendAll(t, b.Backend, entries[i:i+100]...)
				}
				sink := &orderedSink{lies: lies, fail: func(e outbox.Entry, attempt int) error {
					switch {
					case e.ID == "e050":
						return backoff.Permanent(errors.New("rejected by the broker"))
					case attempt == 1 && seq[e.ID]%17 == 0:
						return errors.New("transient hiccup")
					}
					return nil
				}}
				startRelay(t, b, sink, outbox.RelayOptions{
					BatchSize: 120, MaxInFlight: 50, PollInterval: 50 * time.Millisecond,
					Backoff:          backoff.Policy{Base: 20 * time.Millisecond, Max: 100 * time.Millisecond},
					BreakerThreshold: -1,
				})
				waitFor(t, time.Minute, "every entry but the poison one sent", func() bool { return len(b.snapshot()) >= 399 })
				synctest.Wait()

				sent := b.snapshot()
				if len(sent) != 399 {
					t.Fatalf("recorded %d entries sent, want 399", len(sent))
				}
				last := map[string]int{}
				done := map[string]bool{}
				for _, id := range sent {
					e := entries[seq[id]]
					if done[id] {
						t.Fatalf("%s recorded sent twice", id)
					}
					done[id] = true
					if p, ok := last[e.Key]; ok && seq[id] < p {
						t.Fatalf("key %s: %s recorded sent after e%03d", e.Key, id, p)
					}
					last[e.Key] = seq[id]
				}
				if sink.maxKey < 2 {
					t.Fatalf("the hot key went to the sink one entry per call")
				}
				written := sink.snapshot()
				if !lies {
					if err := checkKeyOrder(written, seq); err != nil {
						t.Fatal(err)
					}
					return
				}
				// The lying sink wrote some entries ahead of a failed
				// predecessor; each was written again after it: the last
				// writes of every key are in append order.
				lastWrite := map[string]int{}
				for i, e := range written {
					lastWrite[e.ID] = i
				}
				var final []outbox.Entry
				for i, e := range written {
					if lastWrite[e.ID] == i {
						final = append(final, e)
					}
				}
				if err := checkKeyOrder(final, seq); err != nil {
					t.Fatalf("last writes: %v", err)
				}
				if len(written) == len(final) {
					t.Fatal("the lying sink never wrote ahead of a failure; the test proves nothing")
				}
			})
		})
	}
}

// TestRelayBreakerIsPerTopic: a relay publishes to two topics, one of
// which the sink cannot reach. The dead topic's breaker opens and its
// entries wait (and burn no attempts) for the cooldown, while the other
// topic's entries flow at once; an entry behind a dead-topic entry of its
// key waits with it. The breaker's state change is logged with the topic.
func TestRelayBreakerIsPerTopic(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New(memory.Options{Partitions: 2})
		sink := &recorder{fail: func(e outbox.Entry, _ int) error {
			if e.Topic == "dead" {
				return errors.New("broker unreachable for this topic")
			}
			return nil
		}}
		var logs lockedBuffer
		startRelay(t, b, sink, outbox.RelayOptions{
			BatchSize: 4, PollInterval: 10 * time.Millisecond,
			Backoff:          backoff.Policy{Base: time.Millisecond, Max: time.Millisecond, Min: time.Millisecond, MaxAttempts: -1},
			BreakerThreshold: 3, BreakerCooldown: time.Hour,
			Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn})),
		})
		// The live topic works before the dead one dies.
		appendAll(t, b, outbox.Entry{ID: "warm-up", Topic: "live", Key: "w"})
		waitFor(t, time.Minute, "the warm-up entry", func() bool { return len(sink.snapshot()) == 1 })
		for i := range 10 {
			appendAll(t, b, outbox.Entry{ID: fmt.Sprint("dead-", i), Topic: "dead", Key: fmt.Sprint("d", i)})
		}
		appendAll(t, b, outbox.Entry{ID: "mixed-dead", Topic: "dead", Key: "mixed"}, outbox.Entry{ID: "mixed-live", Topic: "live", Key: "mixed"})
		deadAttempts := func() int {
			sink.mu.Lock()
			defer sink.mu.Unlock()
			n := 0
			for id, a := range sink.attempts {
				if strings.HasPrefix(id, "dead-") || id == "mixed-dead" {
					n += a
				}
			}
			return n
		}
		waitFor(t, time.Minute, "the dead topic's breaker open", func() bool { return strings.Contains(logs.String(), "circuit breaker opened") })
		synctest.Wait()
		if !strings.Contains(logs.String(), "topic=dead") {
			t.Fatalf("the breaker's WARN does not name the topic:\n%s", logs.String())
		}
		before := deadAttempts()
		start := time.Now()
		for i := range 50 {
			appendAll(t, b, outbox.Entry{ID: fmt.Sprint("live-", i), Topic: "live", Key: fmt.Sprint("l", i%7)})
			time.Sleep(100 * time.Millisecond)
		}
		waitFor(t, time.Minute, "the live topic's entries", func() bool {
			n := 0
			for _, e := range sink.snapshot() {
				if strings.HasPrefix(e.ID, "live-") {
					n++
				}
			}
			return n == 50
		})
		if d := time.Since(start); d > 10*time.Second {
			t.Fatalf("the live topic's 50 entries (appended over 5s) took %v; they waited for the dead topic's breaker (cooldown 1h)", d)
		}
		if got := deadAttempts(); got != before {
			t.Fatalf("the dead topic was published to %d more times while its breaker was open", got-before)
		}
		for _, e := range sink.snapshot() {
			if e.ID == "mixed-live" {
				t.Fatal("mixed-live was delivered while mixed-dead, earlier in its key, waits for its retry")
			}
		}
	})
}

// TestRelayBreakerOpensInAnOutageWithManyWorkers: the threshold counts
// each worker's failed rounds in a row, and when the sink is down for good
// every worker gets there, so the breaker opens and publishing stops
// until the probe, whatever the number of partitions.
func TestRelayBreakerOpensInAnOutageWithManyWorkers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New(memory.Options{Partitions: 8})
		for i := range 400 {
			appendAll(t, b, outbox.Entry{ID: fmt.Sprint("e", i), Topic: "t", Key: fmt.Sprint("k", i)})
		}
		sink := &recorder{fail: func(outbox.Entry, int) error { return errors.New("broker unreachable") }}
		var logs lockedBuffer
		startRelay(t, b, sink, outbox.RelayOptions{
			BatchSize: 5, PollInterval: 10 * time.Millisecond,
			Backoff:          backoff.Policy{Base: time.Millisecond, Max: time.Millisecond, Min: time.Millisecond, MaxAttempts: -1},
			BreakerThreshold: 3, BreakerCooldown: time.Hour,
			Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn})),
		})
		waitFor(t, time.Minute, "the breaker open", func() bool { return strings.Contains(logs.String(), "circuit breaker opened") })
		synctest.Wait()
		sink.mu.Lock()
		calls := sink.calls
		sink.mu.Unlock()
		time.Sleep(30 * time.Minute) // half a cooldown
		synctest.Wait()
		sink.mu.Lock()
		defer sink.mu.Unlock()
		if sink.calls != calls {
			t.Fatalf("the sink was called %d more times while the breaker was open", sink.calls-calls)
		}
		if calls > 8*3 {
			t.Fatalf("the sink was called %d times before the breaker opened; with 8 workers and a threshold of 3, at most 24", calls)
		}
	})
}
