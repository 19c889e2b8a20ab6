package conformance

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/outboxrelay/outbox"
)

// onceCases pin that an entry is handed out once per attempt: a batch never
// holds an entry twice, and an entry marked sent is never fetched again,
// under the same lease or a later one. The SPI allows a duplicate only
// around a lease loss or a crash; these cases have neither, so any
// duplicate is a backend bug. They make retries come due at once (a
// negative Delay) behind entries held back by them, the interplay that
// made the Redis backend repeat entries.
func onceCases[Tx any]() []testCase[Tx] {
	return []testCase[Tx]{
		{group: "Fetch", name: "EachEntryOnceAroundADueRetry", run: fetchOnceAroundDueRetry[Tx]},
		{group: "Outcome", name: "SentNeverFetchedAgain", run: outcomeSentNeverFetchedAgain[Tx]},
	}
}

// fetchOnceAroundDueRetry: a failing entry whose retry is due, an entry of
// its key held back behind it and an unordered entry come out of one fetch
// once each (the held-back one not at all).
func fetchOnceAroundDueRetry[Tx any](t *testing.T, s *env[Tx]) {
	// Both keyed entries are due in the past, a before b. (A backend may
	// place a never-attempted entry in its key's order at its NotBefore,
	// past or not, or at its append time; either way a comes first.)
	a, b := entry("a", "k"), entry("b", "k")
	now := time.Now()
	a.NotBefore, b.NotBefore = now.Add(-time.Hour), now.Add(-30*time.Minute)
	s.appendCommit(t, a, b, entry("x", ""))
	l := s.acquire(t, 0, s.owner("relay"), longTTL)
	expectIDs(t, "first fetch (limit 1)", s.fetch(t, l, 1), "a")
	// a retries 10 minutes ago: later than b's NotBefore, and due.
	s.markFailed(t, l, outbox.Failure{ID: "a", Error: "boom", Delay: -10 * time.Minute})
	got := s.fetch(t, l, 10)
	expectDistinct(t, "fetch after a failed with its retry due 10 minutes ago", got)
	expectIDs(t, "fetch after a failed with its retry due 10 minutes ago (a is retried; it holds back b; x comes once)", got, "a", "x")
	s.markSent(t, l, "a", "x")
	expectIDs(t, "fetch after a and x were sent (b is free)", s.fetch(t, l, 10), "b")
	s.markSent(t, l, "b")
	expectIDs(t, "fetch after everything was sent", s.fetch(t, l, 10))
}

// outcomeSentNeverFetchedAgain drives one partition as relays do, without
// a lease loss: it fetches batches (of 5 and of 100 entries in turn, so
// some batches hold every eligible entry), fails some entries with a retry
// due at once (in the past), releases the entries of a failed key that
// follow the failure in the batch, marks the rest sent, and hands the
// partition over to a new lease halfway (or earlier, when the first lease
// finds nothing to fetch). Every batch must hold each entry
// once and no entry marked sent before; in the end every entry was sent
// once, each key's in append order, and a new lease fetches nothing.
func outcomeSentNeverFetchedAgain[Tx any](t *testing.T, s *env[Tx]) {
	const n = 80
	limits := []int{5, 100}
	keys := []string{"k1", "k2", "k3", "k4", ""}
	// Half the entries are due in the past, at NotBefores spread over the
	// hour up to 20 minutes ago, in append order; the rest are due at
	// their append time. Retries are due 10 minutes ago: with a backend
	// that places a never-attempted entry at its NotBefore, past or not, a
	// retry is due after the entries held back behind it (and before the
	// newer ones); with one that uses the append time, before them all.
	const retryIn = -10 * time.Minute
	entries, order, fails := sentOnceFixture(n, keys, time.Now().Add(-time.Hour))
	s.appendCommit(t, entries...)

	sent := map[string]string{} // ID → the lease that marked it sent
	attempts := map[string]int{}
	sentOrder := map[string][]string{} // key → IDs in the order marked sent
	leases, handedOver := 1, false
	l := s.acquire(t, 0, s.owner("relay"), longTTL)
	for round := 1; len(sent) < n; round++ {
		if round > 20*n {
			t.Fatalf("after %d fetches only %d of %d entries were sent", round-1, len(sent), n)
		}
		if !handedOver && len(sent) >= n/2 {
			s.releaseLease(t, l)
			l = s.acquire(t, 0, s.owner("relay"), longTTL)
			leases, handedOver = leases+1, true
		}
		batch := s.fetch(t, l, limits[round%len(limits)])
		what := fmt.Sprintf("fetch %d (under lease %d of 2, %d of %d entries sent)", round, leases, len(sent), n)
		expectDistinct(t, what, batch)
		expectNoneSent(t, what, batch, sent)
		if len(batch) == 0 {
			if !handedOver {
				// A backend may keep unfinished entries from the lease
				// that read them; the next lease gets them.
				s.releaseLease(t, l)
				l = s.acquire(t, 0, s.owner("relay"), longTTL)
				leases, handedOver = leases+1, true
				continue
			}
			t.Fatalf("%s returned nothing while %d entries were neither sent nor parked", what, n-len(sent))
		}
		ok, failures, released := splitAsRelay(batch, attempts, fails, retryIn)
		if len(ok) > 0 {
			s.markSent(t, l, ok...)
		}
		for _, id := range ok {
			sent[id] = fmt.Sprintf("lease %d (fetch %d)", leases, round)
		}
		for _, e := range batch {
			if slices.Contains(ok, e.ID) && e.Key != "" {
				sentOrder[e.Key] = append(sentOrder[e.Key], e.ID)
			}
		}
		if len(failures) > 0 {
			s.markFailed(t, l, failures...)
		}
		if len(released) > 0 {
			s.release(t, l, released...)
		}
	}
	for key, want := range order {
		if got := sentOrder[key]; !slices.Equal(got, want) {
			t.Fatalf("key %q was sent in the order %v, want its append order %v", key, got, want)
		}
	}
	s.releaseLease(t, l)
	expectIDs(t, "fetch by a new lease after every entry was sent", s.peek(t, 0))
}

// sentOnceFixture builds outcomeSentNeverFetchedAgain's n entries, of keys
// in turn: the first half due in the past, at NotBefores a minute apart
// from past, the rest at their append time; entry i fails twice when
// i%9 == 0, else once when i%4 == 1. It returns the entries, each key's
// IDs in append order and the number of attempts that fail per ID.
func sentOnceFixture(n int, keys []string, past time.Time) (entries []outbox.Entry, order map[string][]string, fails map[string]int) {
	order = map[string][]string{} // key → IDs in append order
	fails = map[string]int{}      // ID → attempts that fail
	for i := range n {
		e := entry(fmt.Sprintf("e%02d", i), keys[i%len(keys)])
		if i < n/2 {
			e.NotBefore = past.Add(time.Duration(i) * time.Minute)
		}
		switch {
		case i%9 == 0:
			fails[e.ID] = 2
		case i%4 == 1:
			fails[e.ID] = 1
		}
		if e.Key != "" {
			order[e.Key] = append(order[e.Key], e.ID)
		}
		entries = append(entries, e)
	}
	return entries, order, fails
}

// splitAsRelay decides a batch's outcomes as the relay does: an entry is
// attempted (counted in attempts) and fails, with a retry due retryIn from
// now, while it has attempts left in fails, else it is sent; once an entry
// of a key fails, the entries of that key after it in the batch are
// released, untried.
func splitAsRelay(batch []outbox.Entry, attempts, fails map[string]int, retryIn time.Duration) (ok []string, failures []outbox.Failure, released []string) {
	failed := map[string]bool{}
	for _, e := range batch {
		if e.Key != "" && failed[e.Key] {
			released = append(released, e.ID)
			continue
		}
		attempts[e.ID]++
		if attempts[e.ID] <= fails[e.ID] {
			failures = append(failures, outbox.Failure{ID: e.ID, Error: "boom", Delay: retryIn})
			if e.Key != "" {
				failed[e.Key] = true
			}
			continue
		}
		ok = append(ok, e.ID)
	}
	return ok, failures, released
}

// expectNoneSent fails the case when a batch holds an entry marked sent
// before (sent maps its ID to the lease and fetch that marked it).
func expectNoneSent(t *testing.T, what string, batch []outbox.Entry, sent map[string]string) {
	t.Helper()
	for _, e := range batch {
		if by, ok := sent[e.ID]; ok {
			t.Fatalf("%s returned %s, which %s had marked sent: batch %v", what, e.ID, by, ids(batch))
		}
	}
}

// expectDistinct fails the case when a batch holds an entry twice.
func expectDistinct(t *testing.T, what string, batch []outbox.Entry) {
	t.Helper()
	at := map[string]int{}
	for i, e := range batch {
		if j, ok := at[e.ID]; ok {
			t.Fatalf("%s returned %s twice (at %d and %d): batch %v; a batch holds each entry once", what, e.ID, j, i, ids(batch))
		}
		at[e.ID] = i
	}
}
