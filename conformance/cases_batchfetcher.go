package conformance

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/outboxrelay/outbox"
)

// batchFetcherCases pin [outbox.BatchFetcher]'s promise that FetchBatch
// does exactly what FindPendingBatch does (the relay calls FetchBatch when
// a store has it, while every other case fetches through
// FindPendingBatch). The Corrupt cases pin what it adds. They are skipped,
// saying so, when the backend does not implement it.
func batchFetcherCases[Tx any]() []testCase[Tx] {
	return []testCase[Tx]{
		{group: "BatchFetcher", name: "SameBatchAsFindPendingBatch", run: batchFetcherSame[Tx]},
		{group: "BatchFetcher", name: "FencedLikeFindPendingBatch", run: batchFetcherFenced[Tx]},
	}
}

func (s *env[Tx]) batchFetcher(t *testing.T) outbox.BatchFetcher {
	t.Helper()
	bf, ok := s.b.(outbox.BatchFetcher)
	if !ok {
		t.Skipf("the backend (%T) does not implement outbox.BatchFetcher", s.b)
	}
	return bf
}

// batchFetcherSame drains a partition holding two keys, unkeyed entries, a
// scheduled entry and a failing entry that holds its key back, three at a
// time: at every step FetchBatch returns the batch FindPendingBatch returned
// for the same state (same entries, same order, no parks).
func batchFetcherSame[Tx any](t *testing.T, s *env[Tx]) {
	bf := s.batchFetcher(t)
	sched := entry("s1", "")
	sched.NotBefore = time.Now().Add(time.Hour)
	s.appendCommit(t, entry("a1", "a"), entry("b1", "b"), entry("u1", ""), entry("a2", "a"), sched,
		entry("b2", "b"), entry("a3", "a"), entry("u2", ""), entry("b3", "b"))
	l := s.acquire(t, 0, s.owner("relay"), longTTL)
	// a1 fails once: it holds a2 and a3 back until it is retried. Its
	// retry is due in the past, so no entry becomes due between the two
	// fetches of a step (a retry due "now" may be a millisecond ahead of
	// the store's clock, and the two fetches would see different states).
	first := s.fetch(t, l, 1)
	if len(first) != 1 || first[0].ID != "a1" {
		t.Fatalf("first entry %v, want a1", ids(first))
	}
	s.markFailed(t, l, outbox.Failure{ID: "a1", Error: "transient", Delay: -time.Hour})
	for step := 0; ; step++ {
		if step == 20 {
			t.Fatal("the partition did not drain in 20 steps")
		}
		want := s.fetch(t, l, 3)
		if len(want) > 0 {
			s.release(t, l, ids(want)...)
		}
		got, err := bf.FetchBatch(s.ctx, l, 3)
		if err != nil {
			t.Fatalf("FetchBatch(%s, 3): %v", fmtLease(l), err)
		}
		if len(got.Parked) > 0 {
			t.Fatalf("FetchBatch parked %v; nothing was damaged", got.Parked)
		}
		if !slices.Equal(ids(got.Entries), ids(want)) {
			t.Fatalf("step %d: FetchBatch returned %v, FindPendingBatch %v for the same state; FetchBatch must do exactly what FindPendingBatch does", step, ids(got.Entries), ids(want))
		}
		if len(got.Entries) == 0 {
			return
		}
		s.markSent(t, l, ids(got.Entries)...)
	}
}

// batchFetcherFenced: FetchBatch refuses a stale lease with ErrLeaseLost
// and a non-positive limit with ErrInvalidArgument, as FindPendingBatch
// does, and hands out nothing.
func batchFetcherFenced[Tx any](t *testing.T, s *env[Tx]) {
	bf := s.batchFetcher(t)
	s.appendCommit(t, entry("e1", "k"), entry("e2", "k"))
	old := s.acquire(t, 0, s.owner("first"), longTTL)
	s.releaseLease(t, old)
	cur := s.acquire(t, 0, s.owner("second"), longTTL)
	b, err := bf.FetchBatch(s.ctx, old, 10)
	if !errors.Is(err, outbox.ErrLeaseLost) {
		t.Fatalf("FetchBatch with the released lease %s: %v, %v; want an error wrapping ErrLeaseLost", fmtLease(old), ids(b.Entries), err)
	}
	if _, err := bf.FetchBatch(s.ctx, cur, 0); !errors.Is(err, outbox.ErrInvalidArgument) {
		t.Fatalf("FetchBatch with limit 0: %v; want an error wrapping ErrInvalidArgument", err)
	}
	if got := ids(s.fetch(t, cur, 10)); !slices.Equal(got, []string{"e1", "e2"}) {
		t.Fatalf("the holder fetched %v after the refused calls, want e1 e2", got)
	}
}
