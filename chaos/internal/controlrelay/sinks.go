package controlrelay

import (
	"context"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/outboxrelay/outbox"
)

// innerSink is what the wrappers wrap: a sink with a landing bound that
// can be closed (the Kafka sink; a fake one in tests).
type innerSink interface {
	outbox.Sink
	outbox.LandingBounder
	Close() error
}

// lockedRand is a random source shared by the concurrent Publish calls.
type lockedRand struct {
	mu  sync.Mutex
	rng *rand.Rand
}

// lossySink drops the fraction drop of the messages, evenly spread (one
// in every 1/drop, from a random phase): the message is not handed to the
// inner sink, and Publish reports it published (nil), so the relay marks
// its entry sent and it is lost. Spreading the drops instead of drawing
// each makes a run of n >= 1/drop messages lose at least one, so the
// control cannot pass the checker by luck.
type lossySink struct {
	inner innerSink
	drop  float64
	rng   lockedRand
	acc   float64 // under rng.mu: drop added per message, a drop at 1

	handed, dropped atomic.Int64
}

var (
	_ outbox.Sink           = (*lossySink)(nil)
	_ outbox.LandingBounder = (*lossySink)(nil)
	_ outbox.KeyOrderer     = (*lossySink)(nil)
)

func newLossySink(inner innerSink, drop float64, rng *rand.Rand) *lossySink {
	return &lossySink{inner: inner, drop: drop, rng: lockedRand{rng: rng}, acc: rng.Float64()}
}

// Publish implements [outbox.Sink]: it hands the messages it keeps to the
// inner sink, in the caller's order, and reports nil for the dropped ones.
func (s *lossySink) Publish(ctx context.Context, msgs []outbox.Entry) []error {
	errs := make([]error, len(msgs))
	kept := make([]int, 0, len(msgs)) // indexes into msgs
	s.rng.mu.Lock()
	for i := range msgs {
		s.acc += s.drop
		if s.acc >= 1 {
			s.acc--
			continue
		}
		kept = append(kept, i)
	}
	s.rng.mu.Unlock()
	s.handed.Add(int64(len(msgs)))
	s.dropped.Add(int64(len(msgs) - len(kept)))
	if len(kept) == 0 {
		return errs
	}
	if len(kept) == len(msgs) {
		return s.inner.Publish(ctx, msgs)
	}
	sub := make([]outbox.Entry, len(kept))
	for i, j := range kept {
		sub[i] = msgs[j]
	}
	for i, err := range s.inner.Publish(ctx, sub) {
		errs[kept[i]] = err
	}
	return errs
}

// LandingBound passes the inner sink's bound on.
func (s *lossySink) LandingBound() time.Duration { return s.inner.LandingBound() }

// KeepsKeyOrder passes the inner sink's answer on: dropping messages
// reorders nothing, so the relay batches a key's entries as it does for
// `outbox relay`.
func (s *lossySink) KeepsKeyOrder() bool {
	ko, ok := s.inner.(outbox.KeyOrderer)
	return ok && ko.KeepsKeyOrder()
}

// Close closes the inner sink.
func (s *lossySink) Close() error { return s.inner.Close() }

// shuffleSink hands each Publish call's messages to the inner sink in a
// shuffled order, and maps the inner sink's results back to the caller's
// order. It claims to keep key order (KeepsKeyOrder reports true) so that
// the relay gives it several entries of a key per call, which it then
// reorders: the broken promise the checker must catch.
type shuffleSink struct {
	inner innerSink
	rng   lockedRand

	calls, multiKey, handed atomic.Int64
}

var (
	_ outbox.Sink           = (*shuffleSink)(nil)
	_ outbox.LandingBounder = (*shuffleSink)(nil)
	_ outbox.KeyOrderer     = (*shuffleSink)(nil)
)

func newShuffleSink(inner innerSink, rng *rand.Rand) *shuffleSink {
	return &shuffleSink{inner: inner, rng: lockedRand{rng: rng}}
}

// Publish implements [outbox.Sink]: msgs go to the inner sink in the order
// perm gives, and error i of the result is msgs[i]'s.
func (s *shuffleSink) Publish(ctx context.Context, msgs []outbox.Entry) []error {
	s.calls.Add(1)
	s.handed.Add(int64(len(msgs)))
	if len(msgs) < 2 {
		return s.inner.Publish(ctx, msgs)
	}
	s.rng.mu.Lock()
	order, multi := perm(msgs, s.rng.rng)
	s.rng.mu.Unlock()
	if multi {
		s.multiKey.Add(1)
	}
	shuffled := make([]outbox.Entry, len(msgs))
	for i, j := range order {
		shuffled[i] = msgs[j]
	}
	inner := s.inner.Publish(ctx, shuffled)
	errs := make([]error, len(msgs))
	for i, j := range order {
		errs[j] = inner[i]
	}
	return errs
}

// topicKey is the scope of the order a KeyOrderer keeps.
type topicKey struct{ topic, key string }

// perm returns the order in which msgs are handed on: order[i] is the index
// in msgs of the i-th message handed on. It is a random permutation,
// except that when msgs hold two or more entries of one non-empty key and
// topic (multi) and the permutation kept every such key's order, the
// positions of a key's first two entries are swapped, so that whenever
// reordering a key is possible it happens.
func perm(msgs []outbox.Entry, rng *rand.Rand) (order []int, multi bool) {
	order = rng.Perm(len(msgs))
	// last: for each key, the highest msgs index handed on so far, and
	// where in order it was.
	type seen struct{ idx, pos int }
	last := make(map[topicKey]seen, len(msgs))
	swapA, swapB := -1, -1
	for pos, idx := range order {
		if msgs[idx].Key == "" {
			continue
		}
		tk := topicKey{msgs[idx].Topic, msgs[idx].Key}
		prev, ok := last[tk]
		if !ok {
			last[tk] = seen{idx, pos}
			continue
		}
		multi = true
		if idx < prev.idx {
			return order, true // a later entry of the key goes first already
		}
		if swapA < 0 {
			swapA, swapB = prev.pos, pos
		}
		last[tk] = seen{idx, pos}
	}
	if swapA >= 0 {
		order[swapA], order[swapB] = order[swapB], order[swapA]
	}
	return order, multi
}

// KeepsKeyOrder reports true, falsely: see [shuffleSink].
func (s *shuffleSink) KeepsKeyOrder() bool { return true }

// LandingBound passes the inner sink's bound on.
func (s *shuffleSink) LandingBound() time.Duration { return s.inner.LandingBound() }

// Close closes the inner sink.
func (s *shuffleSink) Close() error { return s.inner.Close() }
