package conformance

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/outboxrelay/outbox"
)

func fetchCases[Tx any]() []testCase[Tx] {
	return []testCase[Tx]{
		{group: "Fetch", name: "FIFOWithinPartition", run: fetchFIFO[Tx]},
		{group: "Fetch", name: "FIFOOneLargeTxSmallBatches", run: fetchFIFOLargeTx[Tx]},
		{group: "Fetch", name: "BatchLimitHonoured", run: fetchBatchLimit[Tx]},
		{group: "Fetch", name: "NotBeforeHonoured", run: fetchNotBefore[Tx]},
		{group: "Fetch", name: "ScheduledEntryDoesNotHoldBackItsKey", run: fetchScheduledNoHoldBack[Tx]},
		{group: "Fetch", name: "OrderedByNotBefore", run: fetchOrderedByNotBefore[Tx]},
		{group: "Fetch", name: "OrderedByRetryTime", run: fetchOrderedByRetryTime[Tx]},
		{group: "Fetch", name: "OtherPartitionsInvisible", partitions: 4, run: fetchOtherPartitions[Tx]},
	}
}

func claimCases[Tx any]() []testCase[Tx] {
	return []testCase[Tx]{
		{group: "Claims", name: "NotHandedToAnotherOwnerWhileLeaseLive", run: claimsExclusive[Tx]},
		{group: "Claims", name: "ComeBackInOrderAfterLeaseExpiry", run: claimsBackAfterExpiry[Tx]},
		{group: "Claims", name: "ComeBackInOrderAfterLeaseRelease", run: claimsBackAfterRelease[Tx]},
		{group: "Claims", name: "ReleaseReturnsEntriesUnchanged", run: claimsReleaseUnchanged[Tx]},
		{group: "Claims", name: "ReleaseIgnoresUnknownAndUnclaimed", run: claimsReleaseUnknown[Tx]},
	}
}

func outcomeCases[Tx any]() []testCase[Tx] {
	return []testCase[Tx]{
		{group: "Outcome", name: "MarkSentRemovesAndIsIdempotent", run: outcomeMarkSent[Tx]},
		{group: "Outcome", name: "MarkFailedReschedulesAfterDelay", run: outcomeMarkFailedRetry[Tx]},
		{group: "Outcome", name: "MarkFailedKeepsLongErrors", run: outcomeMarkFailedLongError[Tx]},
		{group: "Outcome", name: "MarkFailedParks", run: outcomeMarkFailedPark[Tx]},
		{group: "Outcome", name: "MarkFailedNeverRevivesSent", run: outcomeMarkFailedNeverRevives[Tx]},
	}
}

func holdBackCases[Tx any]() []testCase[Tx] {
	return []testCase[Tx]{
		{group: "HoldBack", name: "FailingEntryHoldsBackOnlyItsKey", run: holdBackOnlyItsKey[Tx]},
		{group: "HoldBack", name: "EndsWhenFailingEntrySent", run: holdBackEndsWhenSent[Tx]},
		{group: "HoldBack", name: "EndsWhenFailingEntryParked", run: holdBackEndsWhenParked[Tx]},
		{group: "HoldBack", name: "EmptyKeyNeverHeldBack", run: holdBackEmptyKey[Tx]},
	}
}

func fetchFIFO[Tx any](t *testing.T, s *env[Tx]) {
	s.appendCommit(t, entry("e1", "a"), entry("e2", "a"))
	s.appendCommit(t, entry("e3", "b"))
	s.appendCommit(t, entry("e4", "a"), entry("e5", ""), entry("e6", "b"))
	s.appendCommit(t, entry("e7", ""))
	expectIDs(t, "FindPendingBatch of entries appended in four transactions (append order: slice order, then commit order)", s.peek(t, 0), "e1", "e2", "e3", "e4", "e5", "e6", "e7")
}

func fetchFIFOLargeTx[Tx any](t *testing.T, s *env[Tx]) {
	// 240 entries of one key, interleaved with another key and unordered
	// entries, all in one transaction: they share an append time, so only
	// the append order can order them.
	var in []outbox.Entry
	for i := range 240 {
		in = append(in, entry(fmt.Sprintf("hot-%03d", i), "hot"))
		if i%12 == 0 {
			in = append(in, entry(fmt.Sprintf("cold-%03d", i), "cold"))
		}
		if i%20 == 0 {
			in = append(in, entry(fmt.Sprintf("free-%03d", i), ""))
		}
	}
	s.appendCommit(t, in...)
	want := ids(in)
	l := s.acquire(t, 0, s.owner("relay"), longTTL)
	limits := []int{7, 1, 13, 2, 50}
	pos := 0
	for n := 0; pos < len(want); n++ {
		limit := limits[n%len(limits)]
		batch := s.fetch(t, l, limit)
		if len(batch) == 0 {
			t.Fatalf("batch %d (limit %d) is empty with %d of %d entries not fetched yet, next %s", n, limit, len(want)-pos, len(want), want[pos])
		}
		if len(batch) < min(limit, len(want)-pos) {
			t.Fatalf("batch %d returned %d entries %v with limit %d and %d entries due: a batch is the whole prefix up to the limit", n, len(batch), ids(batch), limit, len(want)-pos)
		}
		got := ids(batch)
		exp := want[pos : pos+len(got)]
		if !slices.Equal(got, exp) {
			t.Fatalf("batch %d (limit %d) = %v, want %v: %s", n, limit, got, exp, explainOrder(in, pos, batch))
		}
		s.markSent(t, l, got...)
		pos += len(got)
	}
	expectIDs(t, "FindPendingBatch after every entry was fetched and marked sent", s.fetch(t, l, 10))
}

// explainOrder names the first ordering rule a batch breaks: it holds a
// later entry of a key without an earlier one still pending.
func explainOrder(in []outbox.Entry, pos int, batch []outbox.Entry) string {
	inBatch := map[string]bool{}
	for _, e := range batch {
		inBatch[e.ID] = true
	}
	index := map[string]int{}
	for i, e := range in {
		index[e.ID] = i
	}
	for _, e := range batch {
		for j := pos; j < index[e.ID]; j++ {
			if p := in[j]; p.Key == e.Key && p.Key != "" && !inBatch[p.ID] {
				return fmt.Sprintf("the batch holds %s of key %q without the earlier %s of the same key", e.ID, e.Key, p.ID)
			}
		}
	}
	return "entries of one transaction must come back in slice order (ties in due time are broken by append order)"
}

func fetchBatchLimit[Tx any](t *testing.T, s *env[Tx]) {
	var in []outbox.Entry
	for i := range 10 {
		in = append(in, entry(fmt.Sprintf("e%02d", i), ""))
	}
	s.appendCommit(t, in...)
	l := s.acquire(t, 0, s.owner("relay"), longTTL)
	for _, c := range []struct {
		limit int
		want  []string
	}{
		{3, []string{"e00", "e01", "e02"}},
		{1, []string{"e03"}},
		{100, []string{"e04", "e05", "e06", "e07", "e08", "e09"}},
		{5, nil},
	} {
		b := s.fetch(t, l, c.limit)
		expectIDs(t, fmt.Sprintf("FindPendingBatch with limit %d", c.limit), b, c.want...)
		if len(b) > 0 {
			s.markSent(t, l, ids(b)...)
		}
	}
}

func fetchNotBefore[Tx any](t *testing.T, s *env[Tx]) {
	far := entry("far", "k-far")
	far.NotBefore = time.Now().Add(time.Hour)
	sched := entry("scheduled", "k-scheduled")
	sched.NotBefore = time.Now().Add(scheduleAhead)
	s.appendCommit(t, far, sched, entry("now", "k-now"))
	l := s.acquire(t, 0, s.owner("relay"), longTTL)
	b := s.fetch(t, l, 10)
	returned := time.Now()
	expectSubsequence(t, fmt.Sprintf("FindPendingBatch right after appending entries scheduled an hour and %v ahead", scheduleAhead), b, []string{"now"}, "now", "scheduled")
	if len(b) == 1 {
		s.markSent(t, l, "now")
		b = s.fetchUntil(t, l, 10, func(b []outbox.Entry) bool { return len(b) > 0 }, "the scheduled entry to become due")
		returned = time.Now()
		expectIDs(t, "FindPendingBatch once the scheduled entry is due (the one an hour ahead is not)", b, "scheduled")
	} else {
		s.markSent(t, l, "now")
		b = b[1:]
	}
	if surelyBefore(returned, sched.NotBefore) {
		t.Fatalf("entry scheduled for %v was fetched by a call that returned at %v, %v early", sched.NotBefore.Format(time.StampMilli), returned.Format(time.StampMilli), sched.NotBefore.Sub(returned))
	}
	if !b[0].NotBefore.IsZero() && b[0].NotBefore.Sub(sched.NotBefore).Abs() > time.Millisecond {
		t.Fatalf("scheduled entry came back with NotBefore %v, want %v or zero", b[0].NotBefore, sched.NotBefore)
	}
	s.markSent(t, l, "scheduled")
	expectIDs(t, "FindPendingBatch with only the entry scheduled an hour ahead left", s.fetch(t, l, 10))
}

func fetchScheduledNoHoldBack[Tx any](t *testing.T, s *env[Tx]) {
	// A scheduled entry takes its place in its key's order at the time it
	// is scheduled for; being never attempted, it holds back nothing.
	far := entry("k-1-far", "k")
	far.NotBefore = time.Now().Add(time.Hour)
	s.appendCommit(t, far)
	s.appendCommit(t, entry("k-2", "k"))
	l := s.acquire(t, 0, s.owner("relay"), longTTL)
	expectIDs(t, "FindPendingBatch while the earlier entry of key k is scheduled an hour ahead (a never-attempted entry must not hold back its key)", s.fetch(t, l, 10), "k-2")
	s.markSent(t, l, "k-2")

	// The same with a schedule that comes due during the case: j-1 is
	// scheduled, j-2 appended after it.
	soon := entry("j-1-scheduled", "j")
	soon.NotBefore = time.Now().Add(scheduleAhead)
	s.appendCommit(t, soon)
	s.appendCommit(t, entry("j-2", "j"))
	appended := time.Now()
	b := s.fetch(t, l, 10)
	returned := time.Now()
	switch {
	case surelyBefore(returned, soon.NotBefore):
		expectIDs(t, "FindPendingBatch while the earlier entry of key j is scheduled in the future", b, "j-2")
	case surelyBefore(appended, soon.NotBefore):
		// j-1 may have come due during the fetch, after j-2.
		expectSubsequence(t, "FindPendingBatch around the time j-1 is scheduled for", b, []string{"j-2"}, "j-2", "j-1-scheduled")
	default:
		// The machine was too slow: both may be due, in either order.
		expectSubsequence(t, "FindPendingBatch after the time j-1 is scheduled for", b, []string{"j-2"}, "j-1-scheduled", "j-2", "j-1-scheduled")
	}
	s.markSent(t, l, ids(b)...)
	if !slices.Contains(ids(b), "j-1-scheduled") {
		b = s.fetchUntil(t, l, 10, func(b []outbox.Entry) bool { return len(b) > 0 }, "the scheduled entry to become due")
		expectIDs(t, "FindPendingBatch once the scheduled entry is due (j-2 was sent before it, and k-1-far is not due)", b, "j-1-scheduled")
		s.markSent(t, l, "j-1-scheduled")
	}
	expectIDs(t, "FindPendingBatch with only the entry scheduled an hour ahead left", s.fetch(t, l, 10))
}

func fetchOrderedByNotBefore[Tx any](t *testing.T, s *env[Tx]) {
	l := s.acquire(t, 0, s.owner("relay"), longTTL)
	s.withMargin(t, "ordering by NotBefore", func(p string, ahead time.Duration) bool {
		now := time.Now()
		late := entry(p+"late", "")
		late.NotBefore = now.Add(2 * ahead)
		early := entry(p+"early", "")
		early.NotBefore = now.Add(ahead)
		s.appendCommit(t, late, early, entry(p+"now", ""))
		// The order is known only if the append got its due time before
		// early's NotBefore.
		conclusive := surelyBefore(time.Now(), early.NotBefore)
		b := s.fetchUntil(t, l, 10, func(b []outbox.Entry) bool { return len(b) == 3 }, "both scheduled entries to become due")
		s.markSent(t, l, ids(b)...)
		if conclusive {
			expectIDs(t, "FindPendingBatch once everything is due (order is by due time, not append order)", b, p+"now", p+"early", p+"late")
		}
		return conclusive
	})
}

func fetchOrderedByRetryTime[Tx any](t *testing.T, s *env[Tx]) {
	s.appendCommit(t, entry("a", ""), entry("b", ""), entry("c", ""))
	l := s.acquire(t, 0, s.owner("relay"), longTTL)
	expectIDs(t, "first fetch", s.fetch(t, l, 10), "a", "b", "c")
	s.markFailed(t, l,
		outbox.Failure{ID: "a", Error: "an hour ago", Delay: -time.Hour},
		outbox.Failure{ID: "b", Error: "two hours ago", Delay: -2 * time.Hour},
		outbox.Failure{ID: "c", Error: "in an hour", Delay: time.Hour},
	)
	s.appendCommit(t, entry("d", ""))
	expectIDs(t, "FindPendingBatch after a and b failed with retry times in the past (b's earlier) and c with one an hour ahead (order is by next attempt time: b, a, then d appended after both retry times)", s.fetch(t, l, 10), "b", "a", "d")
}

func fetchOtherPartitions[Tx any](t *testing.T, s *env[Tx]) {
	// Find keys of two different partitions.
	keyOf := map[int]string{}
	for i := 0; len(keyOf) < s.parts; i++ {
		k := fmt.Sprintf("key-%d", i)
		if _, ok := keyOf[outbox.PartitionOf(k, s.parts)]; !ok {
			keyOf[outbox.PartitionOf(k, s.parts)] = k
		}
	}
	for p := range s.parts {
		s.appendCommit(t, entry(fmt.Sprintf("p%d", p), keyOf[p]))
	}
	for p := range s.parts {
		l := s.acquire(t, p, s.owner("relay"), longTTL)
		expectIDs(t, fmt.Sprintf("FindPendingBatch on partition %d (key %q)", p, keyOf[p]), s.fetch(t, l, 10), fmt.Sprintf("p%d", p))
	}
}

func claimsExclusive[Tx any](t *testing.T, s *env[Tx]) {
	s.appendCommit(t, keyed("e", "k", 5)...)
	a := s.acquire(t, 0, s.owner("relay-a"), longTTL)
	expectIDs(t, "fetch by lease A", s.fetch(t, a, 3), "e1", "e2", "e3")
	_, err := s.b.AcquireLease(s.ctx, 0, s.owner("relay-b"), longTTL)
	expectErr(t, "AcquireLease by owner B while A's lease on the partition is live (B could otherwise be handed A's claimed entries)", err, outbox.ErrLeaseHeld)
	s.markSent(t, a, "e1", "e2", "e3")
	expectIDs(t, "fetch by A after finishing its batch", s.fetch(t, a, 10), "e4", "e5")
}

func claimsBackAfterExpiry[Tx any](t *testing.T, s *env[Tx]) {
	s.appendCommit(t, entry("e1", "k"), entry("f1", ""), entry("e2", "k"), entry("e3", "k"), entry("f2", ""))
	a, batch, _ := s.shortLeaseFetch(t, 0, s.owner("relay-a"), 3)
	expectIDs(t, "fetch by lease A", batch, "e1", "f1", "e2")
	// A dies without finishing its batch.
	b := s.acquireAfterExpiry(t, 0, s.owner("relay-b"), longTTL)
	if b.Version <= a.Version {
		t.Fatalf("takeover lease %s does not have a higher version than the expired %s", fmtLease(b), fmtLease(a))
	}
	if got, err := s.b.FindPendingBatch(s.ctx, a, 10); !errors.Is(err, outbox.ErrLeaseLost) || len(got) > 0 {
		t.Fatalf("FindPendingBatch with expired, taken-over %s: got %v, %v; want no entries and an error wrapping ErrLeaseLost", fmtLease(a), ids(got), err)
	}
	expectIDs(t, "fetch by the new holder B (A's unfinished claims must come back by themselves, in their original order)", s.fetch(t, b, 10), "e1", "f1", "e2", "e3", "f2")
}

func claimsBackAfterRelease[Tx any](t *testing.T, s *env[Tx]) {
	s.appendCommit(t, keyed("e", "k", 5)...)
	a := s.acquire(t, 0, s.owner("relay-a"), longTTL)
	expectIDs(t, "fetch by lease A", s.fetch(t, a, 3), "e1", "e2", "e3")
	s.markSent(t, a, "e1")
	s.releaseLease(t, a)
	b := s.acquire(t, 0, s.owner("relay-b"), longTTL)
	if b.Version <= a.Version {
		t.Fatalf("lease %s after a release does not have a higher version than the released %s", fmtLease(b), fmtLease(a))
	}
	expectIDs(t, "fetch by B after A released its lease with e2, e3 unfinished", s.fetch(t, b, 10), "e2", "e3", "e4", "e5")
}

func claimsReleaseUnchanged[Tx any](t *testing.T, s *env[Tx]) {
	s.appendCommit(t, entry("e1", "k"), entry("e2", "k"), entry("f1", ""))
	l := s.acquire(t, 0, s.owner("relay"), longTTL)
	expectIDs(t, "first fetch", s.fetch(t, l, 10), "e1", "e2", "f1")
	s.markFailed(t, l, outbox.Failure{ID: "e1", Error: "boom", Delay: -time.Hour})
	s.release(t, l, "e2", "f1")
	// e1 is due again at once (an hour ago, before f1) but failing, so it
	// holds back e2.
	expectIDs(t, "fetch after e1 failed (retry due an hour ago) and e2, f1 were released", s.fetch(t, l, 10), "e1", "f1")
	s.appendCommit(t, entry("g1", ""))
	s.release(t, l, "f1", "e1")
	b := s.fetch(t, l, 10)
	expectIDs(t, "fetch after releasing e1 and f1 (a release must keep the due time: g1 was appended after both were due)", b, "e1", "f1", "g1")
	if b[0].Attempts != 1 || b[0].LastError != "boom" {
		t.Fatalf("released e1 came back with Attempts %d, LastError %q; want 1, \"boom\": Release must return entries unchanged", b[0].Attempts, b[0].LastError)
	}
	if b[1].Attempts != 0 || b[1].LastError != "" {
		t.Fatalf("released f1 came back with Attempts %d, LastError %q; want 0, \"\" (Release is not a failed attempt)", b[1].Attempts, b[1].LastError)
	}
}

func claimsReleaseUnknown[Tx any](t *testing.T, s *env[Tx]) {
	s.appendCommit(t, entry("e1", ""), entry("e2", ""))
	l := s.acquire(t, 0, s.owner("relay"), longTTL)
	expectIDs(t, "first fetch", s.fetch(t, l, 1), "e1")
	s.markSent(t, l, "e1")
	s.release(t, l, "nope", "e1", "e2")
	expectIDs(t, "fetch after releasing an unknown ID, a sent ID and an unclaimed ID", s.fetch(t, l, 10), "e2")
}

func outcomeMarkSent[Tx any](t *testing.T, s *env[Tx]) {
	s.appendCommit(t, entry("e1", "k"), entry("e2", "k"), entry("e3", "k"))
	l := s.acquire(t, 0, s.owner("relay"), longTTL)
	expectIDs(t, "first fetch", s.fetch(t, l, 10), "e1", "e2", "e3")
	s.markSent(t, l, "e1", "e2")
	if err := s.b.MarkSent(s.ctx, l, []string{"e1", "unknown", "e2"}); err != nil {
		t.Fatalf("MarkSent of already-sent and unknown IDs: got %v, want nil (MarkSent is idempotent)", err)
	}
	s.release(t, l, "e3")
	s.releaseLease(t, l)
	expectIDs(t, "entries after e1, e2 were marked sent (twice) and e3 released", s.peek(t, 0), "e3")
	if in, ok := s.b.(outbox.Inspector); ok {
		st, err := in.Stats(s.ctx)
		if err != nil {
			t.Fatalf("Stats: %v", err)
		}
		if st.Pending != 1 {
			t.Fatalf("Stats.Pending = %d after 2 of 3 entries were sent, want 1", st.Pending)
		}
	}
}

func outcomeMarkFailedRetry[Tx any](t *testing.T, s *env[Tx]) {
	s.appendCommit(t, entry("e1", "k1"), entry("e2", "k2"))
	l := s.acquire(t, 0, s.owner("relay"), longTTL)
	expectIDs(t, "first fetch", s.fetch(t, l, 10), "e1", "e2")
	// The store adds Delay to its own clock while MarkFailed runs, after
	// retryAt was taken, so e2 is due at retryAt or later.
	retryAt := time.Now().Add(scheduleAhead)
	s.markFailed(t, l,
		outbox.Failure{ID: "e1", Error: "far", Delay: time.Hour},
		outbox.Failure{ID: "e2", Error: "boom 1", Delay: scheduleAhead},
	)
	b := s.fetch(t, l, 10)
	expectSubsequence(t, "fetch right after MarkFailed with Delay an hour and "+scheduleAhead.String(), b, nil, "e2")
	if len(b) == 0 {
		b = s.fetchUntil(t, l, 10, func(b []outbox.Entry) bool { return len(b) > 0 }, "the failed entry to be due again")
	}
	if returned := time.Now(); surelyBefore(returned, retryAt) {
		t.Fatalf("entry failed with Delay %v (due at %v or later) was fetched again by a call that returned at %v, %v early", scheduleAhead, retryAt.Format(time.StampMilli), returned.Format(time.StampMilli), retryAt.Sub(returned))
	}
	expectIDs(t, "fetch once the Delay passed (e1 retries in an hour)", b, "e2")
	if b[0].Attempts != 1 || b[0].LastError != "boom 1" {
		t.Fatalf("after one MarkFailed, e2 has Attempts %d, LastError %q; want 1, \"boom 1\"", b[0].Attempts, b[0].LastError)
	}
	s.markFailed(t, l, outbox.Failure{ID: "e2", Error: "boom 2", Delay: 0})
	b = s.fetchUntil(t, l, 10, func(b []outbox.Entry) bool { return len(b) > 0 }, "the failed entry to be due again")
	expectIDs(t, "fetch after the second failure (retry now)", b, "e2")
	if b[0].Attempts != 2 || b[0].LastError != "boom 2" {
		t.Fatalf("after two MarkFailed, e2 has Attempts %d, LastError %q; want 2, \"boom 2\"", b[0].Attempts, b[0].LastError)
	}
}

func outcomeMarkFailedLongError[Tx any](t *testing.T, s *env[Tx]) {
	s.appendCommit(t, entry("e1", ""))
	l := s.acquire(t, 0, s.owner("relay"), longTTL)
	expectIDs(t, "first fetch", s.fetch(t, l, 10), "e1")
	long := strings.Repeat("ошибка-error ", 400) // ~5 KiB, multi-byte runes
	s.markFailed(t, l, outbox.Failure{ID: "e1", Error: long, Delay: 0})
	b := s.fetchUntil(t, l, 10, func(b []outbox.Entry) bool { return len(b) > 0 }, "the failed entry to be due again")
	got := b[0].LastError
	if len(got) < 1024 || !strings.HasPrefix(long, got) {
		t.Fatalf("LastError of a %d-byte error is %d bytes (prefix of the error: %v); want the error, truncated at no less than 1024 bytes", len(long), len(got), strings.HasPrefix(long, got))
	}
}

func outcomeMarkFailedPark[Tx any](t *testing.T, s *env[Tx]) {
	s.appendCommit(t, entry("e1", "k"), entry("e2", ""))
	l := s.acquire(t, 0, s.owner("relay"), longTTL)
	expectIDs(t, "first fetch", s.fetch(t, l, 10), "e1", "e2")
	s.markFailed(t, l, outbox.Failure{ID: "e1", Error: "poison", Park: true, Delay: 0})
	s.release(t, l, "e2")
	expectIDs(t, "fetch after parking e1 (parked entries are never fetched)", s.fetch(t, l, 10), "e2")
	s.markSent(t, l, "e2")
	s.releaseLease(t, l)
	s.sleep(t, 50*time.Millisecond)
	expectIDs(t, "fetch by a new lease after parking e1", s.peek(t, 0))
	if in, ok := s.b.(outbox.Inspector); ok {
		parked, err := in.Parked(s.ctx, "", 10)
		if err != nil {
			t.Fatalf("Parked: %v", err)
		}
		expectIDs(t, "Parked", parked, "e1")
		if parked[0].Attempts != 1 || parked[0].LastError != "poison" {
			t.Fatalf("parked e1 has Attempts %d, LastError %q; want 1, \"poison\"", parked[0].Attempts, parked[0].LastError)
		}
	}
}

func outcomeMarkFailedNeverRevives[Tx any](t *testing.T, s *env[Tx]) {
	s.appendCommit(t, entry("e1", "k"), entry("e2", "k"))
	l := s.acquire(t, 0, s.owner("relay"), longTTL)
	expectIDs(t, "first fetch", s.fetch(t, l, 1), "e1")
	s.markSent(t, l, "e1")
	if err := s.b.MarkFailed(s.ctx, l, []outbox.Failure{{ID: "e1", Error: "late", Delay: 0}, {ID: "unknown", Error: "x", Delay: 0}}); err != nil {
		t.Fatalf("MarkFailed of a sent and an unknown ID: got %v, want nil (they are ignored)", err)
	}
	if err := s.b.MarkFailed(s.ctx, l, []outbox.Failure{{ID: "e1", Error: "late", Park: true}}); err != nil {
		t.Fatalf("MarkFailed(Park) of a sent ID: got %v, want nil (it is ignored)", err)
	}
	expectIDs(t, "fetch after MarkFailed of the sent e1 (a sent entry never comes back, and must not hold back e2)", s.fetch(t, l, 10), "e2")
	if in, ok := s.b.(outbox.Inspector); ok {
		parked, err := in.Parked(s.ctx, "", 10)
		if err != nil {
			t.Fatalf("Parked: %v", err)
		}
		expectIDs(t, "Parked after MarkFailed(Park) of a sent entry", parked)
	}
}

// holdBackSetup appends key k (k1..k3), key j (j1) and unordered u1, u2,
// fetches them all and fails k1 with a retry retryIn from now, releasing the
// rest. It returns the lease.
func holdBackSetup[Tx any](t *testing.T, s *env[Tx], retryIn time.Duration) outbox.Lease {
	t.Helper()
	s.appendCommit(t, entry("k1", "k"), entry("j1", "j"), entry("k2", "k"), entry("u1", ""), entry("k3", "k"), entry("u2", ""))
	l := s.acquire(t, 0, s.owner("relay"), longTTL)
	expectIDs(t, "first fetch", s.fetch(t, l, 10), "k1", "j1", "k2", "u1", "k3", "u2")
	s.markFailed(t, l, outbox.Failure{ID: "k1", Error: "boom", Delay: retryIn})
	s.release(t, l, "j1", "k2", "u1", "k3", "u2")
	return l
}

func holdBackOnlyItsKey[Tx any](t *testing.T, s *env[Tx]) {
	l := holdBackSetup(t, s, time.Hour)
	expectIDs(t, "fetch while k1 is failing (it must hold back k2, k3 of key k, and nothing else)", s.fetch(t, l, 10), "j1", "u1", "u2")
	s.markSent(t, l, "j1", "u1", "u2")
	s.appendCommit(t, entry("k4", "k"), entry("j2", "j"), entry("u3", ""))
	expectIDs(t, "fetch of entries appended while k1 is failing", s.fetch(t, l, 10), "j2", "u3")
}

func holdBackEndsWhenSent[Tx any](t *testing.T, s *env[Tx]) {
	l := holdBackSetup(t, s, -time.Hour)
	expectIDs(t, "fetch while k1 is failing, its retry due an hour ago (k1 comes first and still holds back k2, k3)", s.fetch(t, l, 10), "k1", "j1", "u1", "u2")
	s.markSent(t, l, "j1", "u1", "u2")
	s.release(t, l, "k1")
	expectIDs(t, "fetch after k1 was released, still failing (k2, k3 stay held back)", s.fetch(t, l, 10), "k1")
	s.markSent(t, l, "k1")
	expectIDs(t, "fetch after k1 was sent (its key is free again, in order)", s.fetch(t, l, 10), "k2", "k3")
}

func holdBackEndsWhenParked[Tx any](t *testing.T, s *env[Tx]) {
	l := holdBackSetup(t, s, -time.Hour)
	b := s.fetchUntil(t, l, 10, func(b []outbox.Entry) bool { return slices.Contains(ids(b), "k1") }, "k1 to be due again")
	expectIDs(t, "fetch once k1's retry is due (an hour ago: before the others' append time)", b, "k1", "j1", "u1", "u2")
	s.markSent(t, l, "j1", "u1", "u2")
	s.markFailed(t, l, outbox.Failure{ID: "k1", Error: "poison", Park: true})
	expectIDs(t, "fetch after k1 was parked (its key is free again, in order)", s.fetch(t, l, 10), "k2", "k3")
}

func holdBackEmptyKey[Tx any](t *testing.T, s *env[Tx]) {
	s.appendCommit(t, entry("u1", ""), entry("u2", ""), entry("u3", ""))
	l := s.acquire(t, 0, s.owner("relay"), longTTL)
	expectIDs(t, "first fetch", s.fetch(t, l, 10), "u1", "u2", "u3")
	s.markFailed(t, l, outbox.Failure{ID: "u1", Error: "boom", Delay: time.Hour})
	s.release(t, l, "u2", "u3")
	expectIDs(t, "fetch while u1 (empty key) is failing: entries with an empty key are never held back", s.fetch(t, l, 10), "u2", "u3")
}
