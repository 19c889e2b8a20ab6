package conformance

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/outboxrelay/outbox"
)

// collationCases pin the order the listings page in to the byte order of
// IDs (as Go compares strings), never a database's collation, with IDs
// whose byte order differs from a case-insensitive or locale order: a
// backend that sorts by its collation while paging with ">" skips or
// repeats entries, and one that sorts and pages by its collation lists
// them out of order. They are skipped, saying so, when the backend does
// not implement the interface of the listing.
func collationCases[Tx any]() []testCase[Tx] {
	return []testCase[Tx]{
		{group: "Collation", name: "ParkedPagesInByteOrder", run: collationParked[Tx]},
		{group: "Collation", name: "EntriesPageInByteOrder", run: collationEntries[Tx]},
		{group: "Collation", name: "BlockedKeysTiesInByteOrder", run: collationBlocked[Tx]},
	}
}

// collationIDs are IDs whose byte order differs from case-insensitive and
// locale orders: upper case before lower case, digits compared as
// characters, punctuation between them, non-ASCII letters last.
var collationIDs = []string{"B", "a", "c", "Ä", "ä", "Z", "b", "10", "9", "1", "_x", "-x", "~x", "a-b", "aB", "ab", "A"}

// collationEntries appends one entry per collationIDs, each with a key of
// its own, in a shuffled order.
func (s *env[Tx]) appendCollationIDs(t *testing.T) []string {
	t.Helper()
	var batch []outbox.Entry
	for i := range collationIDs {
		id := collationIDs[(i*7)%len(collationIDs)]
		batch = append(batch, entry(id, "key "+id))
	}
	s.appendCommit(t, batch...)
	return slices.Sorted(slices.Values(collationIDs))
}

// expectByteOrder fails the case unless pages, listed with limit, add up
// to want.
func expectByteOrder(t *testing.T, what string, limit int, got, want []string) {
	t.Helper()
	if !slices.Equal(got, want) {
		t.Fatalf("%s, with limit %d, each page after the last ID of the one before, listed %q; want %q: each entry once, by the byte order of IDs (not a database collation)", what, limit, got, want)
	}
}

func collationParked[Tx any](t *testing.T, s *env[Tx]) {
	in := s.inspector(t)
	want := s.appendCollationIDs(t)
	l := s.acquire(t, 0, s.owner("relay"), longTTL)
	batch := s.fetch(t, l, 100)
	var fs []outbox.Failure
	for _, e := range batch {
		fs = append(fs, outbox.Failure{ID: e.ID, Error: "poison", Park: true})
	}
	s.markFailed(t, l, fs...)
	for _, limit := range []int{1, 2, 3, 100} {
		var got []string
		after := ""
		for range len(want) + 2 {
			page, err := in.Parked(s.ctx, after, limit)
			if err != nil {
				t.Fatalf("Parked(after %q, limit %d): %v", after, limit, err)
			}
			got = append(got, ids(page)...)
			if len(page) < limit {
				break
			}
			after = page[len(page)-1].ID
		}
		expectByteOrder(t, "paging Parked", limit, got, want)
	}
}

func collationEntries[Tx any](t *testing.T, s *env[Tx]) {
	ls := s.lister(t)
	want := s.appendCollationIDs(t)
	for _, limit := range []int{1, 2, 3, 100} {
		var got []string
		after := ""
		for range len(want) + 2 {
			page := s.entries(t, ls, outbox.StateDue, outbox.ListFilter{}, after, limit)
			got = append(got, infoIDs(page)...)
			if len(page) < limit {
				break
			}
			after = page[len(page)-1].ID
		}
		expectByteOrder(t, "paging Entries(due)", limit, got, want)
	}
}

func collationBlocked[Tx any](t *testing.T, s *env[Tx]) {
	ls := s.lister(t)
	s.appendCollationIDs(t)
	var waiting []outbox.Entry
	for _, id := range collationIDs {
		waiting = append(waiting, entry(id+" waiting", "key "+id))
	}
	s.appendCommit(t, waiting...)
	// Every head fails in one call: the keys are blocked since the same
	// store time (where the store gives one call one time), so their order
	// is the tie-breaker's, the byte order of the head IDs.
	l := s.acquire(t, 0, s.owner("relay"), longTTL)
	batch := s.fetch(t, l, 100)
	var fs []outbox.Failure
	var rest []string
	for _, e := range batch {
		if slices.Contains(collationIDs, e.ID) {
			fs = append(fs, outbox.Failure{ID: e.ID, Error: "boom", Delay: time.Hour})
		} else {
			rest = append(rest, e.ID)
		}
	}
	if len(fs) != len(collationIDs) {
		t.Fatalf("first fetch returned %v; want every head %q", ids(batch), collationIDs)
	}
	s.markFailed(t, l, fs...)
	if len(rest) > 0 {
		s.release(t, l, rest...)
	}
	all := s.blockedKeys(t, ls, outbox.ListFilter{}, outbox.BlockedKey{}, 100)
	want := slices.Clone(all)
	slices.SortStableFunc(want, func(x, y outbox.BlockedKey) int {
		if c := x.Since.Compare(y.Since); c != 0 {
			return c
		}
		return strings.Compare(x.Head.ID, y.Head.ID)
	})
	if len(all) != len(collationIDs) || !slices.Equal(headIDs(all), headIDs(want)) {
		t.Fatalf("BlockedKeys listed %s; want every head of %q, ordered by Since, ties by the byte order of the head IDs: %q", fmtBlockedList(all), collationIDs, headIDs(want))
	}
	ties := 0
	for i := 1; i < len(all); i++ {
		if all[i].Since.Equal(all[i-1].Since) {
			ties++
		}
	}
	t.Logf("%d of the %d keys tie with the key before on Since", ties, len(all))
	for _, limit := range []int{1, 2, 3} {
		got := headIDs(s.allBlocked(t, ls, outbox.ListFilter{}, limit))
		expectByteOrder(t, fmt.Sprintf("paging BlockedKeys (%d ties)", ties), limit, got, headIDs(want))
	}
}
