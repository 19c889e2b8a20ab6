package conformance

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/outboxrelay/outbox"
)

// prefetcherCases pin [outbox.Prefetcher]: FetchNext claims the batch
// behind the one in flight without handing out, or changing, the entries
// in flight, and an attempted entry in flight keeps holding back its key.
// The relay calls it for every full batch when a store has it. They are
// skipped, saying so, when the backend does not implement it.
func prefetcherCases[Tx any]() []testCase[Tx] {
	return []testCase[Tx]{
		{group: "Prefetcher", name: "LeavesInFlightOut", run: prefetcherLeavesInFlightOut[Tx]},
		{group: "Prefetcher", name: "AttemptedInFlightHoldsBackItsKey", run: prefetcherAttemptedHoldsBack[Tx]},
		{group: "Prefetcher", name: "FencedLikeFetchBatch", run: prefetcherFenced[Tx]},
	}
}

func (s *env[Tx]) prefetcher(t *testing.T) outbox.Prefetcher {
	t.Helper()
	p, ok := s.b.(outbox.Prefetcher)
	if !ok {
		t.Skipf("the backend (%T) does not implement outbox.Prefetcher", s.b)
	}
	return p
}

// fetchNext calls FetchNext or fails the case; it fails on parks too
// (nothing in these cases is damaged).
func (s *env[Tx]) fetchNext(t *testing.T, p outbox.Prefetcher, l outbox.Lease, limit int, inFlight []outbox.Entry) []outbox.Entry {
	t.Helper()
	b, err := p.FetchNext(s.ctx, l, limit, inFlight)
	if err != nil {
		t.Fatalf("FetchNext(%s, %d, in flight %v): %v", fmtLease(l), limit, ids(inFlight), err)
	}
	if len(b.Parked) > 0 {
		t.Fatalf("FetchNext parked %v; nothing was damaged", b.Parked)
	}
	return b.Entries
}

// prefetcherLeavesInFlightOut: with a batch of two keyed entries in
// flight, FetchNext returns the three entries behind them (another key, an
// unkeyed entry, a third key), never one in flight. Finishing both batches
// in the relay's order (the one in flight first) leaves what was behind
// them, in order; releasing instead gives every entry back unchanged, in
// its original order.
func prefetcherLeavesInFlightOut[Tx any](t *testing.T, s *env[Tx]) {
	p := s.prefetcher(t)
	s.appendCommit(t, entry("x1", "a"), entry("y1", "b"), entry("z1", ""), entry("x2", "c"), entry("y2", "d"), entry("z2", ""), entry("w1", "e"))
	l := s.acquire(t, 0, s.owner("relay"), longTTL)
	inFlight := s.fetch(t, l, 2)
	if got := ids(inFlight); !slices.Equal(got, []string{"x1", "y1"}) {
		t.Fatalf("first batch %v, want x1 y1", got)
	}
	next := s.fetchNext(t, p, l, 3, inFlight)
	if got := ids(next); !slices.Equal(got, []string{"z1", "x2", "y2"}) {
		t.Fatalf("FetchNext with x1 y1 in flight returned %v, want z1 x2 y2 (the entries behind the batch in flight, never one of it)", got)
	}
	// Give everything back: both batches come back unchanged, in order.
	s.release(t, l, ids(inFlight)...)
	s.release(t, l, ids(next)...)
	all := s.fetch(t, l, 10)
	if got := ids(all); !slices.Equal(got, []string{"x1", "y1", "z1", "x2", "y2", "z2", "w1"}) {
		t.Fatalf("after releasing both batches the partition holds %v, want x1 y1 z1 x2 y2 z2 w1", got)
	}
	for _, e := range all {
		if e.Attempts != 0 || e.LastError != "" {
			t.Fatalf("entry %s came back with attempts %d, last error %q; FetchNext must leave the entries in flight unchanged", e.ID, e.Attempts, e.LastError)
		}
	}
	// The relay's order: the batch in flight is marked sent, then the
	// batch fetched ahead, and the next fetch returns what is left.
	s.release(t, l, ids(all)...)
	inFlight = s.fetch(t, l, 2)
	next = s.fetchNext(t, p, l, 3, inFlight)
	if got := ids(next); !slices.Equal(got, []string{"z1", "x2", "y2"}) {
		t.Fatalf("FetchNext with x1 y1 in flight (after the release) returned %v, want z1 x2 y2", got)
	}
	s.markSent(t, l, ids(inFlight)...)
	s.markSent(t, l, ids(next)...)
	if got := ids(s.fetch(t, l, 10)); !slices.Equal(got, []string{"z2", "w1"}) {
		t.Fatalf("after both batches were sent the partition holds %v, want z2 w1", got)
	}
}

// prefetcherAttemptedHoldsBack: r1 failed once and is in flight again (its
// retry is due); FetchNext must not hand out r2, the next entry of its
// key, while r1 may still fail again, but returns the other key's entry.
// Once r1 is sent, r2 comes.
func prefetcherAttemptedHoldsBack[Tx any](t *testing.T, s *env[Tx]) {
	p := s.prefetcher(t)
	s.appendCommit(t, entry("r1", "k"), entry("r2", "k"), entry("o1", "other"))
	l := s.acquire(t, 0, s.owner("relay"), longTTL)
	if got := ids(s.fetch(t, l, 1)); !slices.Equal(got, []string{"r1"}) {
		t.Fatalf("first batch %v, want r1", got)
	}
	s.markFailed(t, l, outbox.Failure{ID: "r1", Error: "transient", Delay: -time.Hour})
	inFlight := s.fetch(t, l, 1)
	if len(inFlight) != 1 || inFlight[0].ID != "r1" || inFlight[0].Attempts != 1 {
		t.Fatalf("the retry batch is %v, want r1 with 1 attempt", inFlight)
	}
	if got := ids(s.fetchNext(t, p, l, 10, inFlight)); !slices.Equal(got, []string{"o1"}) {
		t.Fatalf("FetchNext with the attempted r1 in flight returned %v, want o1 only: r2 must wait until r1 is sent or parked", got)
	}
	s.markSent(t, l, "r1", "o1")
	if got := ids(s.fetch(t, l, 10)); !slices.Equal(got, []string{"r2"}) {
		t.Fatalf("after r1 was sent the partition holds %v, want r2", got)
	}
}

// prefetcherFenced: FetchNext refuses a stale lease with ErrLeaseLost and
// a non-positive limit with ErrInvalidArgument, as FetchBatch does, and
// hands out nothing.
func prefetcherFenced[Tx any](t *testing.T, s *env[Tx]) {
	p := s.prefetcher(t)
	s.appendCommit(t, entry("e1", "k"), entry("e2", "k"), entry("e3", "j"))
	old := s.acquire(t, 0, s.owner("first"), longTTL)
	inFlight := s.fetch(t, old, 1)
	s.releaseLease(t, old)
	cur := s.acquire(t, 0, s.owner("second"), longTTL)
	b, err := p.FetchNext(s.ctx, old, 10, inFlight)
	if !errors.Is(err, outbox.ErrLeaseLost) {
		t.Fatalf("FetchNext with the released lease %s: %v, %v; want an error wrapping ErrLeaseLost", fmtLease(old), ids(b.Entries), err)
	}
	if _, err := p.FetchNext(s.ctx, cur, 0, nil); !errors.Is(err, outbox.ErrInvalidArgument) {
		t.Fatalf("FetchNext with limit 0: %v; want an error wrapping ErrInvalidArgument", err)
	}
	if got := ids(s.fetch(t, cur, 10)); !slices.Equal(got, []string{"e1", "e2", "e3"}) {
		t.Fatalf("the holder fetched %v after the refused calls, want e1 e2 e3", got)
	}
}
