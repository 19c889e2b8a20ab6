package conformance

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/outboxrelay/outbox"
)

// The cases of this file close gaps found by auditing backend.go sentence
// by sentence (see docs/backend-authors.md, "The promises and the
// subtests that pin them"): repeated failures, Cancel after a claim came
// back, Stats after every change, fenced calls given an entry of another
// partition, Requeue of a retrying entry, a lease value that outlived a
// re-acquire by the same owner, and the "not much after" side of each
// time promise.

func auditCases[Tx any]() []testCase[Tx] {
	return []testCase[Tx]{
		{group: "HoldBack", name: "KeepsHoldingBackThroughRepeatedFailures", run: holdBackRepeated[Tx]},
		{group: "Fetch", name: "ScheduledDueNotMuchAfterNotBefore", run: fetchNotMuchAfterNotBefore[Tx]},
		{group: "Outcome", name: "RetryDueNotMuchAfterDelay", run: outcomeNotMuchAfterDelay[Tx]},
		{group: "Lease", name: "ExpiresNotMuchAfterTTL", run: leaseNotMuchAfterTTL[Tx]},
		{group: "Fencing", name: "SameOwnerReacquiredAfterExpiry", run: fencingSameOwnerReacquired[Tx]},
		{group: "Fencing", name: "EntryOfAnotherPartitionUntouched", partitions: 2, run: fencingOtherPartition[Tx]},
		{group: "Canceler", name: "CancelAfterReleaseOrLeaseEnd", run: cancelAfterRelease[Tx]},
		{group: "Inspector", name: "StatsRightAfterEveryChange", run: inspectStatsEveryChange[Tx]},
		{group: "Inspector", name: "RequeueIgnoresRetryingEntry", run: inspectRequeueRetrying[Tx]},
		{group: "Lease", name: "ReacquireExtendsLikeRenew", run: leaseReacquireExtends[Tx]},
		{group: "Lease", name: "ReleaseOfALeaseNotHeldIsNoop", run: leaseReleaseNotHeld[Tx]},
		{group: "HoldBack", name: "OnlyEarlierEntriesHoldBack", run: holdBackOnlyEarlier[Tx]},
		{group: "Claims", name: "ReleaseLeavesUnclaimedEntriesAlone", run: claimsReleaseUnclaimed[Tx]},
		{group: "Fetch", name: "BatchIsTheCallers", run: fetchBatchIsTheCallers[Tx]},
		{group: "Append", name: "IdempotentWhileRetrying", run: appendIdempotentWhileRetrying[Tx]},
		{group: "Membership", name: "RecordGoneNotMuchAfterTTL", run: memberGoneNotMuchAfterTTL[Tx]},
	}
}

func holdBackRepeated[Tx any](t *testing.T, s *env[Tx]) {
	s.appendCommit(t, entry("k1", "k"), entry("j1", "j"), entry("k2", "k"), entry("u1", ""), entry("k3", "k"))
	l := s.acquire(t, 0, s.owner("relay"), longTTL)
	expectIDs(t, "first fetch", s.fetch(t, l, 10), "k1", "j1", "k2", "u1", "k3")
	s.markFailed(t, l, outbox.Failure{ID: "k1", Error: "boom 1", Delay: -time.Hour})
	s.release(t, l, "j1", "k2", "u1", "k3")
	// k1 fails again and again, each retry due at once (an hour ago): it
	// must hold back k2, k3 (and k4, appended meanwhile) the whole time.
	rounds := []struct {
		want []string
		sent []string
	}{
		{want: []string{"k1", "j1", "u1"}, sent: []string{"j1", "u1"}},
		{want: []string{"k1"}},
		{want: []string{"k1", "j2"}, sent: []string{"j2"}},
		{want: []string{"k1"}},
	}
	for i, r := range rounds {
		attempt := i + 1
		b := s.fetch(t, l, 10)
		expectIDs(t, fmt.Sprintf("fetch after k1 failed %d times, retried (not parked), its retry due an hour ago: it still holds back k2, k3 and any later entry of key k", attempt), b, r.want...)
		if b[0].Attempts != attempt || b[0].LastError != fmt.Sprintf("boom %d", attempt) {
			t.Fatalf("k1 after %d failures has Attempts %d, LastError %q; want %d, %q", attempt, b[0].Attempts, b[0].LastError, attempt, fmt.Sprintf("boom %d", attempt))
		}
		if len(r.sent) > 0 {
			s.markSent(t, l, r.sent...)
		}
		s.markFailed(t, l, outbox.Failure{ID: "k1", Error: fmt.Sprintf("boom %d", attempt+1), Delay: -time.Hour})
		if i == 1 {
			s.appendCommit(t, entry("k4", "k"), entry("j2", "j"))
		}
	}
	b := s.fetch(t, l, 10)
	expectIDs(t, "fetch after k1 failed 5 times", b, "k1")
	// A sixth failure with a retry in the future: while k1 waits for it,
	// key k stays held back, whatever else is fetched.
	failStart := time.Now()
	s.markFailed(t, l, outbox.Failure{ID: "k1", Error: "boom 6", Delay: scheduleAhead})
	failEnd := time.Now()
	s.appendCommit(t, entry("k5", "k"), entry("u2", ""))
	appendEnd := time.Now()
	order := retryVersusAppendOrder(failStart, failEnd, failEnd, appendEnd, scheduleAhead)
	deadline := time.Now().Add(waitLimit)
	for {
		b := s.fetch(t, l, 10)
		expectSubsequence(t, "fetch while k1 waits for its retry after 6 failures (k2..k5 stay held back; u2 and k1 in the order of their due times)", b, nil, order...)
		if i := slices.IndexFunc(b, func(e outbox.Entry) bool { return e.ID == "k1" }); i >= 0 {
			if k1 := b[i]; k1.Attempts != 6 {
				t.Fatalf("k1 after 6 failures has Attempts %d, want 6", k1.Attempts)
			}
			if others := slices.Delete(ids(b), i, i+1); len(others) > 0 {
				s.markSent(t, l, others...)
			}
			break
		}
		if len(b) > 0 {
			s.markSent(t, l, ids(b)...)
		}
		if time.Now().After(deadline) {
			t.Fatalf("k1, failed with Delay %v, was not due again within %v", scheduleAhead, waitLimit)
		}
		s.sleep(t, pollEvery)
	}
	s.markFailed(t, l, outbox.Failure{ID: "k1", Error: "poison", Park: true})
	expectIDs(t, "fetch after k1 was parked (its key is free again, in order)", s.fetch(t, l, 10), "k2", "k3", "k4", "k5")
}

// retryVersusAppendOrder is the order in which the fetch returns k1, whose
// MarkFailed with delay ran between failStart and failEnd, and u2, an
// unkeyed entry appended by a transaction that ran between appendStart
// and appendEnd, by the suite's clock: the order of their due times (the
// store's now plus delay, and the store's now at the append). When the
// call times do not decide it (within a few milliseconds, for stores that
// keep milliseconds), either order is allowed: the pair as allowed IDs in
// both orders.
func retryVersusAppendOrder(failStart, failEnd, appendStart, appendEnd time.Time, delay time.Duration) []string {
	const margin = 5 * time.Millisecond
	switch {
	case appendEnd.Add(margin).Before(failStart.Add(delay)):
		return []string{"u2", "k1"} // u2 was due before k1's retry
	case appendStart.After(failEnd.Add(delay).Add(margin)):
		return []string{"k1", "u2"} // the append came after k1 was due again
	}
	return []string{"u2", "k1", "u2"}
}

func fetchNotMuchAfterNotBefore[Tx any](t *testing.T, s *env[Tx]) {
	// The entry is due when the store's clock reaches NotBefore; by the
	// suite's clock that is at NotBefore plus at most clockSkew, however
	// slow the machine, so a fetch that starts then must return it.
	sched := entry("scheduled", "k")
	sched.NotBefore = time.Now().Add(scheduleAhead)
	s.appendCommit(t, sched, entry("other", "j"))
	l := s.acquire(t, 0, s.owner("relay"), longTTL)
	b := s.fetch(t, l, 10)
	expectSubsequence(t, "fetch right after appending", b, []string{"other"}, "other", "scheduled")
	s.markSent(t, l, ids(b)...)
	if len(b) == 2 {
		return // the machine was too slow to see it before it was due
	}
	s.sleepUntil(t, sched.NotBefore.Add(clockSkew))
	expectIDs(t, fmt.Sprintf("fetch that started %v after the entry's NotBefore (it is due by then: an entry is due at its NotBefore, not much later)", clockSkew), s.fetch(t, l, 10), "scheduled")
}

func outcomeNotMuchAfterDelay[Tx any](t *testing.T, s *env[Tx]) {
	s.appendCommit(t, entry("e1", "k"), entry("e2", ""))
	l := s.acquire(t, 0, s.owner("relay"), longTTL)
	expectIDs(t, "first fetch", s.fetch(t, l, 10), "e1", "e2")
	s.markFailed(t, l,
		outbox.Failure{ID: "e1", Error: "boom", Delay: scheduleAhead},
		outbox.Failure{ID: "e2", Error: "boom", Delay: 0},
	)
	// The store computed each due time as its now, during the call, plus
	// Delay: by the suite's clock at most Delay after the call returned
	// (the clocks' offset cancels out; clockSkew covers their drift), so a
	// fetch that starts then must return it, however slow the machine.
	failed := time.Now()
	s.sleepUntil(t, failed.Add(clockSkew))
	b := s.fetch(t, l, 10)
	expectSubsequence(t, fmt.Sprintf("fetch that started %v after MarkFailed(e2, Delay 0) returned (zero means due at once)", clockSkew), b, []string{"e2"}, "e2", "e1")
	s.markSent(t, l, ids(b)...)
	if len(b) == 2 {
		return // the machine was too slow to fetch before e1 was due
	}
	s.sleepUntil(t, failed.Add(scheduleAhead+clockSkew))
	expectIDs(t, fmt.Sprintf("fetch that started %v after MarkFailed(e1, Delay %v) returned (a retry is due Delay after the call, not much later)", scheduleAhead+clockSkew, scheduleAhead), s.fetch(t, l, 10), "e1")
}

// checkExpires fails the case unless l.Expires is ttl after a moment of the
// call that asked for it (between start and end by the suite's clock),
// allowing clockSkew.
func checkExpires(t *testing.T, call string, l outbox.Lease, ttl time.Duration, start, end time.Time) {
	t.Helper()
	lo, hi := start.Add(ttl-clockSkew), end.Add(ttl+clockSkew)
	if l.Expires.Before(lo) || l.Expires.After(hi) {
		t.Fatalf("%s returned %s expiring at %v; want ttl %v after the call, between %v and %v by the suite's clock (allowing %v of skew)",
			call, fmtLease(l), l.Expires.Format(time.StampMilli), ttl, lo.Format(time.StampMilli), hi.Format(time.StampMilli), clockSkew)
	}
}

func leaseNotMuchAfterTTL[Tx any](t *testing.T, s *env[Tx]) {
	start := time.Now()
	a, err := s.b.AcquireLease(s.ctx, 0, "owner-a", shortTTL)
	if err != nil {
		t.Fatalf("AcquireLease(owner-a, %v): %v", shortTTL, err)
	}
	granted := time.Now()
	checkExpires(t, "AcquireLease", a, shortTTL, start, granted)
	// By granted+ttl the lease has expired by the store's clock; a
	// takeover that starts then must succeed at once.
	s.sleepUntil(t, granted.Add(shortTTL+clockSkew))
	b, err := s.b.AcquireLease(s.ctx, 0, "owner-b", longTTL)
	if err != nil {
		t.Fatalf("AcquireLease by owner-b %v after %s was granted with ttl %v: got %v, want the lease (a lease ends ttl after it was granted, not much later)", shortTTL+clockSkew, fmtLease(a), shortTTL, err)
	}
	start = time.Now()
	r, err := s.b.RenewLease(s.ctx, b, shortTTL)
	if err != nil {
		t.Fatalf("RenewLease(%s, %v): %v", fmtLease(b), shortTTL, err)
	}
	renewed := time.Now()
	checkExpires(t, "RenewLease", r, shortTTL, start, renewed)
	s.sleepUntil(t, renewed.Add(shortTTL+clockSkew))
	if _, err := s.b.AcquireLease(s.ctx, 0, "owner-c", longTTL); err != nil {
		t.Fatalf("AcquireLease by owner-c %v after %s was renewed with ttl %v (it was acquired with ttl %v): got %v, want the lease (a renewal sets the expiry to ttl from now, however long the lease had left)", shortTTL+clockSkew, fmtLease(b), shortTTL, longTTL, err)
	}
}

func fencingSameOwnerReacquired[Tx any](t *testing.T, s *env[Tx]) {
	// The realistic way an old lease value meets its owner's new lease: a
	// relay stalls past its lease, then acquires the partition again under
	// the same owner token while a goroutine still holds the old value.
	s.appendCommit(t, append(keyed("e", "k", 3), entry("f1", ""))...)
	old, batch, expiredBy := s.shortLeaseFetch(t, 0, "owner-a", 10)
	expectIDs(t, "fetch by the first lease of owner-a", batch, "e1", "e2", "e3", "f1")
	s.sleepUntil(t, expiredBy.Add(clockSkew))
	cur := s.acquire(t, 0, "owner-a", longTTL)
	if cur.Version <= old.Version {
		t.Fatalf("AcquireLease by owner-a after its %s expired returned %s: a lease granted after expiry has a higher version, even for the same owner", fmtLease(old), fmtLease(cur))
	}
	expectIDs(t, "fetch by owner-a's new lease (the old lease's claims come back by themselves)", s.fetch(t, cur, 10), "e1", "e2", "e3", "f1")
	s.markSent(t, cur, "e1")
	stale := func(call string, err error) {
		t.Helper()
		if !errors.Is(err, outbox.ErrLeaseLost) {
			t.Fatalf("%s with owner-a's old %s while its new %s holds the partition: got %v, want an error wrapping ErrLeaseLost (a lease is its owner and its version)", call, fmtLease(old), fmtLease(cur), err)
		}
	}
	got, err := s.b.FindPendingBatch(s.ctx, old, 10)
	stale("FindPendingBatch", err)
	if len(got) > 0 {
		t.Fatalf("FindPendingBatch with owner-a's old %s returned %v", fmtLease(old), ids(got))
	}
	stale("MarkSent([e2])", s.b.MarkSent(s.ctx, old, []string{"e2"}))
	stale("MarkFailed(e1 sent, retry now)", s.b.MarkFailed(s.ctx, old, []outbox.Failure{{ID: "e1", Error: "old", Delay: 0}}))
	stale("MarkFailed(e2 park, f1 retry in an hour)", s.b.MarkFailed(s.ctx, old, []outbox.Failure{{ID: "e2", Error: "old", Park: true}, {ID: "f1", Error: "old", Delay: time.Hour}}))
	stale("Release([e3, f1])", s.b.Release(s.ctx, old, []string{"e3", "f1"}))
	r, err := s.b.RenewLease(s.ctx, old, longTTL)
	if !errors.Is(err, outbox.ErrLeaseLost) {
		t.Fatalf("RenewLease with owner-a's old %s while its new %s holds the partition: got %s, %v; want an error wrapping ErrLeaseLost", fmtLease(old), fmtLease(cur), fmtLease(r), err)
	}
	if err := s.b.ReleaseLease(s.ctx, old); err != nil {
		t.Fatalf("ReleaseLease with owner-a's old %s: got %v, want nil (a no-op)", fmtLease(old), err)
	}
	_, err = s.b.AcquireLease(s.ctx, 0, "owner-b", longTTL)
	expectErr(t, fmt.Sprintf("AcquireLease by owner-b after ReleaseLease of owner-a's old %s (it must not free the new %s)", fmtLease(old), fmtLease(cur)), err, outbox.ErrLeaseHeld)
	if _, err := s.b.RenewLease(s.ctx, cur, longTTL); err != nil {
		t.Fatalf("RenewLease of owner-a's new %s after calls with its old lease: %v", fmtLease(cur), err)
	}
	s.release(t, cur, "e2", "e3", "f1")
	s.releaseLease(t, cur)
	expectUntouched(t, s, "pending entries after every fenced call with the old lease (the sent e1 stays sent, the rest untouched)", "e2", "e3", "f1")
}

func fencingOtherPartition[Tx any](t *testing.T, s *env[Tx]) {
	keys := keysByPartition(2)
	s.appendCommit(t, entry("a1", keys[0]), entry("b1", keys[1]), entry("a2", keys[0]), entry("b2", keys[1]), entry("b3", keys[1]))
	l0 := s.acquire(t, 0, s.owner("relay-0"), longTTL)
	l1 := s.acquire(t, 1, s.owner("relay-1"), longTTL)
	expectIDs(t, "fetch of partition 0", s.fetch(t, l0, 10), "a1", "a2")
	expectIDs(t, "fetch of partition 1", s.fetch(t, l1, 1), "b1")
	// IDs must belong to lease.Partition: given b1 (claimed by l1) and b2
	// (pending), each of partition 1, the calls with l0 may return nil or
	// an error, but must change nothing of partition 1, nor move its
	// entries into partition 0.
	calls := []struct {
		name string
		call func() error
	}{
		{"MarkSent([b1, b2])", func() error { return s.b.MarkSent(s.ctx, l0, []string{"b1", "b2"}) }},
		{"MarkFailed(b1 retry in an hour, b2 park)", func() error {
			return s.b.MarkFailed(s.ctx, l0, []outbox.Failure{{ID: "b1", Error: "wrong partition", Delay: time.Hour}, {ID: "b2", Error: "wrong partition", Park: true}})
		}},
		{"Release([b1, b2])", func() error { return s.b.Release(s.ctx, l0, []string{"b1", "b2"}) }},
	}
	for _, c := range calls {
		if err := c.call(); err != nil {
			t.Logf("%s with %s (the entries are of partition 1): %v", c.name, fmtLease(l0), err)
		}
	}
	s.markSent(t, l0, "a1", "a2")
	expectIDs(t, "fetch of partition 0 after the calls with its lease on entries of partition 1 (they must not have moved into it)", s.fetch(t, l0, 10))
	s.release(t, l1, "b1")
	s.releaseLease(t, l1)
	s.releaseLease(t, l0)
	got := s.peek(t, 1)
	expectIDs(t, "pending entries of partition 1 after MarkSent, MarkFailed and Release with the lease of partition 0 (they must be untouched)", got, "b1", "b2", "b3")
	for _, e := range got {
		if e.Attempts != 0 || e.LastError != "" {
			t.Fatalf("entry %s of partition 1 has Attempts %d, LastError %q after calls with the lease of partition 0; want 0, \"\"", e.ID, e.Attempts, e.LastError)
		}
	}
	expectIDs(t, "pending entries of partition 0", s.peek(t, 0))
	if in, ok := s.b.(outbox.Inspector); ok {
		parked, err := in.Parked(s.ctx, "", 10)
		if err != nil {
			t.Fatalf("Parked: %v", err)
		}
		expectIDs(t, "Parked after MarkFailed(Park) of an entry of partition 1 with the lease of partition 0", parked)
	}
}

func cancelAfterRelease[Tx any](t *testing.T, s *env[Tx]) {
	c := s.canceler(t)
	s.appendCommit(t, entry("e1", "k"), entry("f1", ""), entry("e2", "k"), entry("f2", ""), entry("e3", "k"), entry("e4", "k"))
	cancel := func(id, how string) {
		t.Helper()
		if err := c.Cancel(s.ctx, id); err != nil {
			t.Fatalf("Cancel(%s) after %s: %v", id, how, err)
		}
	}
	// Claimed, then released by the relay.
	a := s.acquire(t, 0, s.owner("relay-a"), longTTL)
	expectIDs(t, "fetch by lease A", s.fetch(t, a, 2), "e1", "f1")
	s.release(t, a, "e1", "f1")
	cancel("e1", "A released it")
	cancel("f1", "A released it")
	// Claimed, then the lease was released.
	expectIDs(t, "fetch by A after cancelling the released e1 and f1", s.fetch(t, a, 1), "e2")
	s.releaseLease(t, a)
	cancel("e2", "A released its lease with e2 claimed")
	// Claimed, then the lease expired: cancelled before and after a
	// takeover.
	_, batch, expiredBy := s.shortLeaseFetch(t, 0, s.owner("relay-b"), 2)
	expectIDs(t, "fetch by lease B", batch, "f2", "e3")
	s.sleepUntil(t, expiredBy.Add(clockSkew))
	cancel("f2", "B's lease expired with f2 claimed, nobody having taken over")
	cur := s.acquireAfterExpiry(t, 0, s.owner("relay-c"), longTTL)
	cancel("e3", "B's lease expired with e3 claimed and C took over")
	expectIDs(t, "fetch by C (once Cancel returned nil, the entry is never fetched again, whichever way its claim ended)", s.fetch(t, cur, 10), "e4")
	for _, id := range []string{"e1", "f1", "e2", "f2", "e3"} {
		expectErr(t, fmt.Sprintf("Cancel(%s) a second time", id), c.Cancel(s.ctx, id), outbox.ErrNotFound)
	}
	s.release(t, cur, "e4")
	s.releaseLease(t, cur)
	expectIDs(t, "pending entries after the cancels", s.peek(t, 0), "e4")
	if in, ok := s.b.(outbox.Inspector); ok {
		st, err := in.Stats(s.ctx)
		if err != nil {
			t.Fatalf("Stats: %v", err)
		}
		if st.Pending != 1 {
			t.Fatalf("Stats = %+v after cancelling 5 of 6 entries; want Pending 1", st)
		}
	}
}

// statsWant is what Stats must report after a step: exact Pending and
// Parked, and Due between minDue and maxDue (whether claimed entries count
// as due is up to the backend).
type statsWant struct {
	pending, parked int64
	minDue, maxDue  int64
}

// expectStats reads Stats (and PartitionStats, whose counts must add up
// to it, when the backend implements it) and fails the case unless they
// are as want says after step.
func (s *env[Tx]) expectStats(t *testing.T, in outbox.Inspector, step string, want statsWant) {
	t.Helper()
	st, err := in.Stats(s.ctx)
	if err != nil {
		t.Fatalf("Stats after %s: %v", step, err)
	}
	read := time.Now()
	due := fmt.Sprint(want.minDue)
	if want.maxDue != want.minDue {
		due = fmt.Sprintf("%d to %d (claimed entries may or may not count as due)", want.minDue, want.maxDue)
	}
	if st.Pending != want.pending || st.Parked != want.parked || st.Due < want.minDue || st.Due > want.maxDue {
		t.Errorf("Stats after %s = %+v; want Pending %d, Due %s, Parked %d", step, st, want.pending, due, want.parked)
	}
	if (st.Due == 0) != st.OldestDue.IsZero() {
		t.Errorf("Stats after %s = %+v: OldestDue must be zero exactly when no entry is due", step, st)
	}
	if !st.OldestDue.IsZero() && st.OldestDue.After(read.Add(clockSkew)) {
		t.Errorf("Stats after %s has OldestDue %v, in the future (read at %v): it is the due time of a due entry", step, st.OldestDue, read)
	}
	pi, ok := s.b.(outbox.PartitionInspector)
	if !ok {
		return
	}
	ps, err := pi.PartitionStats(s.ctx)
	if err != nil {
		t.Fatalf("PartitionStats after %s: %v", step, err)
	}
	var sum outbox.Stats
	for _, p := range ps {
		sum.Pending += p.Pending
		sum.Due += p.Due
		sum.Parked += p.Parked
	}
	if sum.Pending != want.pending || sum.Parked != want.parked || sum.Due < want.minDue || sum.Due > want.maxDue {
		t.Errorf("PartitionStats after %s add up to Pending %d, Due %d, Parked %d; want Pending %d, Due %s, Parked %d", step, sum.Pending, sum.Due, sum.Parked, want.pending, due, want.parked)
	}
}

func inspectStatsEveryChange[Tx any](t *testing.T, s *env[Tx]) {
	in := s.inspector(t)
	exact := func(pending, due, parked int64) statsWant { return statsWant{pending, parked, due, due} }
	s.expectStats(t, in, "nothing was appended", exact(0, 0, 0))
	s.appendCommit(t, entry("a", "k"), entry("b", "k"), entry("c", ""))
	s.expectStats(t, in, "appending a, b (key k) and c", exact(3, 3, 0))
	tx := s.begin(t)
	if err := s.b.AppendInTx(s.ctx, tx, entry("rolled-back", "")); err != nil {
		t.Fatalf("AppendInTx: %v", err)
	}
	if err := s.h.Rollback(s.ctx, tx); err != nil {
		t.Fatalf("Harness.Rollback: %v", err)
	}
	s.expectStats(t, in, "an append that was rolled back", exact(3, 3, 0))
	sched := entry("s1", "k-s")
	sched.NotBefore = time.Now().Add(time.Hour)
	s.appendCommit(t, sched)
	s.expectStats(t, in, "appending s1 scheduled an hour ahead", exact(4, 3, 0))
	l := s.acquire(t, 0, s.owner("relay"), longTTL)
	expectIDs(t, "fetch", s.fetch(t, l, 10), "a", "b", "c")
	s.expectStats(t, in, "claiming a, b, c", statsWant{pending: 4, parked: 0, minDue: 0, maxDue: 3})
	s.markSent(t, l, "c")
	s.expectStats(t, in, "MarkSent(c)", statsWant{pending: 3, parked: 0, minDue: 0, maxDue: 2})
	s.markFailed(t, l, outbox.Failure{ID: "a", Error: "boom", Delay: time.Hour})
	s.expectStats(t, in, "MarkFailed(a, retry in an hour), b still claimed", statsWant{pending: 3, parked: 0, minDue: 0, maxDue: 1})
	s.release(t, l, "b")
	s.expectStats(t, in, "releasing b, held back by the failing a (due, held back)", exact(3, 1, 0))
	s.appendCommit(t, entry("d", ""))
	s.expectStats(t, in, "appending d", exact(4, 2, 0))
	expectIDs(t, "fetch while a retries in an hour", s.fetch(t, l, 10), "d")
	s.markFailed(t, l, outbox.Failure{ID: "d", Error: "poison", Park: true})
	s.expectStats(t, in, "parking d (b, held back behind a since it was released, still counts as due: its next attempt time came long ago)", exact(3, 1, 1))
	if n, err := in.Requeue(s.ctx, "d"); n != 1 || err != nil {
		t.Fatalf("Requeue(d) with d parked: got %d, %v; want 1, nil", n, err)
	}
	s.expectStats(t, in, "requeueing d (due now; b still due and held back)", exact(4, 2, 0))
	expectIDs(t, "fetch after requeueing d", s.fetch(t, l, 10), "d")
	before := time.Now()
	s.markFailed(t, l, outbox.Failure{ID: "d", Error: "poison again", Delay: -time.Hour})
	after := time.Now()
	s.expectStats(t, in, "MarkFailed(d, retry due an hour ago)", exact(4, 2, 0))
	// d (no key) is now the oldest due entry, due an hour before the call.
	if st, err := in.Stats(s.ctx); err != nil {
		t.Fatalf("Stats: %v", err)
	} else if lo, hi := before.Add(-time.Hour-clockSkew), after.Add(-time.Hour+clockSkew); st.OldestDue.Before(lo) || st.OldestDue.After(hi) {
		t.Errorf("Stats.OldestDue = %v after d failed with a retry due an hour ago; want d's due time, between %v and %v (now minus OldestDue is the lag)", st.OldestDue, lo, hi)
	}
	expectIDs(t, "fetch after d failed again", s.fetch(t, l, 10), "d")
	s.markFailed(t, l, outbox.Failure{ID: "d", Error: "poison for good", Park: true})
	s.expectStats(t, in, "parking d again", exact(3, 1, 1))
	c, ok := s.b.(outbox.Canceler)
	if !ok {
		t.Logf("the backend (%T) does not implement outbox.Canceler: Stats after Cancel not checked", s.b)
		return
	}
	for _, step := range []struct {
		id, what string
		want     statsWant
	}{
		{"d", "cancelling the parked d", exact(3, 1, 0)},
		{"b", "cancelling the held-back b", exact(2, 0, 0)},
		{"s1", "cancelling the scheduled s1", exact(1, 0, 0)},
		{"a", "cancelling the retrying a", exact(0, 0, 0)},
	} {
		if err := c.Cancel(s.ctx, step.id); err != nil {
			t.Fatalf("Cancel(%s): %v", step.id, err)
		}
		s.expectStats(t, in, step.what, step.want)
	}
}

func inspectRequeueRetrying[Tx any](t *testing.T, s *env[Tx]) {
	in := s.inspector(t)
	s.appendCommit(t, entry("k1", "k"), entry("k2", "k"), entry("u1", ""))
	l := s.acquire(t, 0, s.owner("relay"), longTTL)
	expectIDs(t, "first fetch", s.fetch(t, l, 10), "k1", "k2", "u1")
	s.markFailed(t, l, outbox.Failure{ID: "k1", Error: "boom 1", Delay: -time.Hour})
	s.release(t, l, "k2", "u1")
	s.appendCommit(t, entry("u2", ""))
	// k1 is pending: failed once, its retry due an hour ago (before u1 and
	// u2). Requeue takes parked entries only.
	if n, err := in.Requeue(s.ctx, "k1", "k2"); n != 0 || err != nil {
		t.Fatalf("Requeue(k1 retrying, k2 pending) with nothing parked: got %d, %v; want 0, nil (IDs that are not parked are ignored)", n, err)
	}
	b := s.fetch(t, l, 10)
	expectIDs(t, "fetch after Requeue of the retrying k1 (its retry time and place are kept: first; k2 stays held back)", b, "k1", "u1", "u2")
	if b[0].Attempts != 1 || b[0].LastError != "boom 1" {
		t.Fatalf("k1 after a Requeue that must ignore it has Attempts %d, LastError %q; want 1, \"boom 1\"", b[0].Attempts, b[0].LastError)
	}
	s.markSent(t, l, "u1", "u2")
	s.markFailed(t, l, outbox.Failure{ID: "k1", Error: "boom 2", Delay: time.Hour})
	if n, err := in.Requeue(s.ctx, "k1"); n != 0 || err != nil {
		t.Fatalf("Requeue(k1) retrying in an hour: got %d, %v; want 0, nil", n, err)
	}
	expectIDs(t, "fetch after Requeue of k1, retrying in an hour (it is not due now, and still holds back k2)", s.fetch(t, l, 10))
	st, err := in.Stats(s.ctx)
	if err != nil {
		t.Fatalf("Stats: %v", err)
	}
	if st.Pending != 2 || st.Parked != 0 {
		t.Fatalf("Stats = %+v with k1 retrying in an hour and k2 held back, after Requeue calls that must ignore k1; want Pending 2, Parked 0", st)
	}
}

func leaseReacquireExtends[Tx any](t *testing.T, s *env[Tx]) {
	var again outbox.Lease
	var start, end time.Time
	a, expiredBy := s.shortLease(t, 0, "owner-a", func(l outbox.Lease) error {
		var err error
		start = time.Now()
		again, err = s.b.AcquireLease(s.ctx, 0, "owner-a", longTTL)
		end = time.Now()
		if err == nil && again.Version != l.Version {
			// The lease had expired: a new one was granted.
			return fmt.Errorf("AcquireLease by the holder returned %s, not its %s: %w", fmtLease(again), fmtLease(l), outbox.ErrLeaseLost)
		}
		return err
	})
	checkLease(t, again, 0, "owner-a")
	checkExpires(t, "AcquireLease by the holder itself (it extends the lease by ttl, as RenewLease would)", again, longTTL, start, end)
	// Past the expiry of the lease as first granted, it still holds.
	s.sleepUntil(t, expiredBy.Add(clockSkew))
	_, err := s.b.AcquireLease(s.ctx, 0, "owner-b", longTTL)
	expectErr(t, fmt.Sprintf("AcquireLease by owner-b after the first expiry of %s, which its holder extended by re-acquiring it with ttl %v", fmtLease(a), longTTL), err, outbox.ErrLeaseHeld)
	s.appendCommit(t, entry("e1", ""))
	expectIDs(t, "fetch with the first lease value after the holder re-acquired it", s.fetch(t, a, 10), "e1")
}

func leaseReleaseNotHeld[Tx any](t *testing.T, s *env[Tx]) {
	a := s.acquire(t, 0, "owner-a", longTTL)
	s.releaseLease(t, a)
	if err := s.b.ReleaseLease(s.ctx, a); err != nil {
		t.Fatalf("ReleaseLease(%s) a second time: got %v, want nil (releasing a released lease is a no-op)", fmtLease(a), err)
	}
	b := s.acquire(t, 0, "owner-b", longTTL)
	if err := s.b.ReleaseLease(s.ctx, a); err != nil {
		t.Fatalf("ReleaseLease(%s) after %s took the partition: got %v, want nil (a no-op)", fmtLease(a), fmtLease(b), err)
	}
	_, err := s.b.AcquireLease(s.ctx, 0, "owner-c", longTTL)
	expectErr(t, fmt.Sprintf("AcquireLease by owner-c after ReleaseLease of the released %s (it must not free %s)", fmtLease(a), fmtLease(b)), err, outbox.ErrLeaseHeld)
	s.releaseLease(t, b)
	// A lease that expired, nobody having taken the partition over.
	c, expiredBy := s.shortLease(t, 0, "owner-c", func(outbox.Lease) error { return nil })
	s.sleepUntil(t, expiredBy.Add(clockSkew))
	if err := s.b.ReleaseLease(s.ctx, c); err != nil {
		t.Fatalf("ReleaseLease(%s) after it expired, nobody having taken over: got %v, want nil (a no-op)", fmtLease(c), err)
	}
	d := s.acquire(t, 0, "owner-d", longTTL)
	if d.Version <= c.Version {
		t.Fatalf("lease %s after %s expired and was released late does not have a higher version", fmtLease(d), fmtLease(c))
	}
}

func holdBackOnlyEarlier[Tx any](t *testing.T, s *env[Tx]) {
	// A failing entry holds back the entries of its key appended after it,
	// not those appended before it.
	s.appendCommit(t, entry("k1", "k"), entry("k2", "k"), entry("k3", "k"), entry("u1", ""))
	l := s.acquire(t, 0, s.owner("relay"), longTTL)
	expectIDs(t, "first fetch", s.fetch(t, l, 10), "k1", "k2", "k3", "u1")
	s.markFailed(t, l, outbox.Failure{ID: "k2", Error: "boom", Delay: time.Hour})
	s.release(t, l, "k1", "k3", "u1")
	expectIDs(t, "fetch while k2 is failing (it holds back k3, appended after it, not k1, appended before it)", s.fetch(t, l, 10), "k1", "u1")
	s.markSent(t, l, "k1", "u1")
	expectIDs(t, "fetch after k1 was sent (k2 retries in an hour and holds back k3)", s.fetch(t, l, 10))
}

func claimsReleaseUnclaimed[Tx any](t *testing.T, s *env[Tx]) {
	s.appendCommit(t, entry("p1", "p"), entry("r1", "k"), entry("k2", "k"), entry("u1", ""))
	l := s.acquire(t, 0, s.owner("relay"), longTTL)
	expectIDs(t, "first fetch", s.fetch(t, l, 2), "p1", "r1")
	s.markFailed(t, l,
		outbox.Failure{ID: "p1", Error: "poison", Park: true},
		outbox.Failure{ID: "r1", Error: "boom", Delay: time.Hour},
	)
	// None of these is claimed: p1 is parked, r1 waits for its retry, k2
	// and u1 were never fetched. Release must leave them as they are.
	s.release(t, l, "p1", "r1", "k2", "u1")
	expectIDs(t, "fetch after Release of a parked, a retrying and two never fetched entries (p1 stays parked, r1 not due, k2 held back behind r1)", s.fetch(t, l, 10), "u1")
	if in, ok := s.b.(outbox.Inspector); ok {
		parked, err := in.Parked(s.ctx, "", 10)
		if err != nil {
			t.Fatalf("Parked: %v", err)
		}
		expectIDs(t, "Parked after a Release of the parked p1", parked, "p1")
		if parked[0].Attempts != 1 {
			t.Fatalf("parked p1 has Attempts %d after a Release, want 1", parked[0].Attempts)
		}
	}
}

func fetchBatchIsTheCallers[Tx any](t *testing.T, s *env[Tx]) {
	want := entry("e1", "k")
	s.appendCommit(t, want)
	l := s.acquire(t, 0, s.owner("relay"), longTTL)
	b := s.fetch(t, l, 10)
	expectIDs(t, "first fetch", b, "e1")
	// The caller owns what it was handed: changing it changes nothing
	// stored.
	for i := range b[0].Payload {
		b[0].Payload[i] = 'X'
	}
	b[0].Headers["conformance-id"] = "changed by the caller"
	b[0].Headers["added-by-the-caller"] = "x"
	b[0].Topic, b[0].Key = "changed", "changed"
	s.release(t, l, "e1")
	s.releaseLease(t, l)
	got := s.peek(t, 0)
	expectIDs(t, "fetch after the caller changed the entry it was handed", got, "e1")
	if d := sameEntry(want, got[0]); d != "" {
		t.Fatalf("e1 fetched again after the caller changed the entry of an earlier fetch: %s (the returned slice and its entries are the caller's)", d)
	}
}

func appendIdempotentWhileRetrying[Tx any](t *testing.T, s *env[Tx]) {
	first := entry("k1", "k")
	s.appendCommit(t, first, entry("k2", "k"))
	l := s.acquire(t, 0, s.owner("relay"), longTTL)
	expectIDs(t, "first fetch", s.fetch(t, l, 10), "k1", "k2")
	s.markFailed(t, l, outbox.Failure{ID: "k1", Error: "boom", Delay: -time.Hour})
	s.release(t, l, "k2")
	// k1 is pending, failed once, its retry due an hour ago. Appending its
	// ID again is a no-op: no new entry, no reset of its attempts, error,
	// due time or place, and it keeps holding back k2 (and k3).
	again := entry("k1", "k")
	again.Payload = []byte("appended again while retrying")
	s.appendCommit(t, again, entry("k3", "k"))
	b := s.fetch(t, l, 10)
	expectIDs(t, "fetch after appending the ID of the retrying k1 again (a no-op: k1 keeps its place and holds back k2, k3)", b, "k1")
	if b[0].Attempts != 1 || b[0].LastError != "boom" {
		t.Fatalf("k1 after its ID was appended again while it was retrying has Attempts %d, LastError %q; want 1, \"boom\" (unchanged)", b[0].Attempts, b[0].LastError)
	}
	if d := sameEntry(first, b[0]); d != "" {
		t.Fatalf("k1 after its ID was appended again while it was retrying: %s; want the first append", d)
	}
	s.markSent(t, l, "k1")
	expectIDs(t, "fetch after k1 was sent", s.fetch(t, l, 10), "k2", "k3")
}

func memberGoneNotMuchAfterTTL[Tx any](t *testing.T, s *env[Tx]) {
	ms := s.membership(t)
	short, long := s.owner("short"), s.owner("long")
	_, _, registered := s.heartbeat(t, ms, outbox.Member{Owner: short, Partitions: []int{0}}, shortTTL)
	// short's record expired shortTTL after the store's clock during its
	// Heartbeat, which returned at registered: a Heartbeat that starts
	// then (allowing clockSkew) must not list it.
	s.sleepUntil(t, registered.Add(shortTTL+clockSkew))
	got, _, end := s.heartbeat(t, ms, outbox.Member{Owner: long}, longTTL)
	if findMember(got, short) >= 0 {
		t.Fatalf("Heartbeat of %q that started %v after %q's Heartbeat with ttl %v returned lists it: %s; a record ends ttl after its heartbeat, not much later",
			long, shortTTL+clockSkew, short, shortTTL, fmtMembers(got, end))
	}
}
