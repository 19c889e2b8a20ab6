package conformance

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/outboxrelay/outbox"
)

// holdBackScaleCases pin hold-back with many held-back entries: the order
// of a key must not depend on how a backend sets a crowd of held-back
// entries aside, and such a crowd must not starve the other keys.
func holdBackScaleCases[Tx any]() []testCase[Tx] {
	return []testCase[Tx]{
		{group: "HoldBack", name: "ManyHeldBackKeepOrder", run: holdBackManyKeepOrder[Tx]},
		{group: "HoldBack", name: "ManyHeldBackDoNotStarveOtherKeys", run: holdBackManyNoStarve[Tx]},
	}
}

// appendChunks appends entries in transactions of at most n entries each.
func (s *env[Tx]) appendChunks(t *testing.T, n int, entries []outbox.Entry) {
	t.Helper()
	for len(entries) > 0 {
		c := min(n, len(entries))
		s.appendCommit(t, entries[:c]...)
		entries = entries[c:]
	}
}

// holdBackManyKeepOrder: k-000 fails while 300 later entries of key k,
// interleaved with entries of other keys, are due. A few small fetches
// happen while k-000 waits for its retry (a backend may set the held-back
// crowd aside during them, but it only gets through part of it); then
// k-000 is retried and sent, and everything is drained with small limits.
// Key k must come out exactly in append order, across batches.
func holdBackManyKeepOrder[Tx any](t *testing.T, s *env[Tx]) {
	const n = 300
	var crowd []outbox.Entry
	crowd = append(crowd, entry("k-000", "k"))
	others := 0
	for i := 1; i <= n; i++ {
		crowd = append(crowd, entry(fmt.Sprintf("k-%03d", i), "k"))
		if i%10 == 0 {
			crowd = append(crowd, entry(fmt.Sprintf("o-%03d", i), fmt.Sprintf("o%d", i%3)))
			others++
		}
	}
	s.appendChunks(t, 110, crowd)
	l := s.acquire(t, 0, s.owner("relay"), longTTL)
	expectIDs(t, "first fetch (limit 1)", s.fetch(t, l, 1), "k-000")
	// k-000 is due scheduleAhead after MarkFailed by the store's clock:
	// at retryAt or later.
	retryAt := time.Now().Add(scheduleAhead)
	s.markFailed(t, l, outbox.Failure{ID: "k-000", Error: "boom", Delay: scheduleAhead})

	nextK, blockerSent, gotOthers := 1, false, 0
	// take checks one batch and finishes it: k-000 may come at any time
	// (it is only retried, never held back), k-001.. only after k-000 was
	// sent and exactly in append order; other keys' entries are sent.
	take := func(round int, limit int, batch []outbox.Entry) {
		t.Helper()
		var sent []string
		for _, e := range batch {
			switch {
			case e.ID == "k-000":
				if blockerSent {
					t.Fatalf("round %d (limit %d): k-000 came back after it was marked sent; batch %v", round, limit, ids(batch))
				}
			case e.Key == "k":
				if !blockerSent {
					t.Fatalf("round %d (limit %d): %s of key k was fetched while k-000 (an earlier entry of k) is still failing and not sent; batch %v", round, limit, e.ID, ids(batch))
				}
				if want := fmt.Sprintf("k-%03d", nextK); e.ID != want {
					t.Fatalf("round %d (limit %d): key k's entry %s was fetched while the earlier %s of the same key was neither fetched nor sent (per-key order broken after %d held-back entries were released); batch %v",
						round, limit, e.ID, want, n, ids(batch))
				}
				nextK++
			default:
				gotOthers++
			}
			sent = append(sent, e.ID)
		}
		if len(sent) > 0 {
			s.markSent(t, l, sent...)
		}
		for _, e := range batch {
			if e.ID == "k-000" {
				blockerSent = true
			}
		}
	}

	// A few small fetches while k-000 waits for its retry.
	round := 0
	for range 3 {
		round++
		take(round, 5, s.fetch(t, l, 5))
	}
	if wait := time.Until(retryAt.Add(clockSkew)); wait > 0 {
		s.sleep(t, wait)
	}
	limits := []int{5, 1, 7, 2, 13}
	deadline := time.Now().Add(waitLimit)
	for nextK <= n || gotOthers < others || !blockerSent {
		round++
		limit := limits[round%len(limits)]
		batch := s.fetch(t, l, limit)
		take(round, limit, batch)
		if len(batch) == 0 {
			if time.Now().After(deadline) {
				t.Fatalf("waited %v: k-000 sent %v, key k delivered up to k-%03d of k-%03d, %d of %d other entries; FindPendingBatch returns nothing",
					waitLimit, blockerSent, nextK-1, n, gotOthers, others)
			}
			s.sleep(t, pollEvery)
		}
	}
	expectIDs(t, "FindPendingBatch after everything was delivered", s.fetch(t, l, 10))
}

// holdBackManyNoStarve: 1200 entries of key h are held back behind the
// failing h-0000 (retry in an hour) and sit ahead of 25 entries of other
// keys. A relay polling with limit 10 must get the other keys' entries,
// in order, within a few calls.
func holdBackManyNoStarve[Tx any](t *testing.T, s *env[Tx]) {
	const crowd, others, maxCalls = 1200, 25, 20
	s.appendCommit(t, entry("h-0000", "h"))
	l := s.acquire(t, 0, s.owner("relay"), longTTL)
	expectIDs(t, "first fetch", s.fetch(t, l, 10), "h-0000")
	s.markFailed(t, l, outbox.Failure{ID: "h-0000", Error: "boom", Delay: time.Hour})

	held := make([]outbox.Entry, crowd)
	for i := range held {
		held[i] = entry(fmt.Sprintf("h-%04d", i+1), "h")
	}
	s.appendChunks(t, 300, held)
	var want []string
	var rest []outbox.Entry
	for i := range others {
		e := entry(fmt.Sprintf("o-%02d", i), fmt.Sprintf("o%d", i%5))
		if i%5 == 4 {
			e.Key = ""
		}
		rest = append(rest, e)
		want = append(want, e.ID)
	}
	s.appendCommit(t, rest...)

	var got []string
	calls := 0
	for ; calls < maxCalls && len(got) < others; calls++ {
		batch := s.fetch(t, l, 10)
		for _, e := range batch {
			if strings.HasPrefix(e.ID, "h-") {
				t.Fatalf("call %d: %s of key h was fetched while h-0000 is failing (retry in an hour); batch %v", calls+1, e.ID, ids(batch))
			}
		}
		got = append(got, ids(batch)...)
		if len(batch) > 0 {
			s.markSent(t, l, ids(batch)...)
		}
	}
	if len(got) < others {
		t.Fatalf("after %d calls of FindPendingBatch(limit 10), got %d of the %d entries of other keys appended behind %d held-back entries of key h (%v): held-back entries starve the other keys",
			calls, len(got), others, crowd, got)
	}
	expectIDs(t, "entries of other keys fetched while key h is held back (in append order)", entriesOf(got), want...)
	expectIDs(t, "FindPendingBatch once only held-back entries are left", s.fetch(t, l, 10))
}

// entriesOf wraps IDs as entries for expectIDs.
func entriesOf(idList []string) []outbox.Entry {
	out := make([]outbox.Entry, len(idList))
	for i, id := range idList {
		out[i].ID = id
	}
	return out
}
