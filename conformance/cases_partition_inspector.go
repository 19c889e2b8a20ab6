package conformance

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/outboxrelay/outbox"
)

// partitionInspectorCases pin [outbox.PartitionInspector]: the counts and
// the live lease of every partition. They are skipped, saying so, when the
// backend does not implement it.
func partitionInspectorCases[Tx any]() []testCase[Tx] {
	return []testCase[Tx]{
		{group: "PartitionInspector", name: "OnePerPartitionInOrder", partitions: 5, run: pstatsOrder[Tx]},
		{group: "PartitionInspector", name: "CountsWhereTheEntriesAre", partitions: 4, run: pstatsCounts[Tx]},
		{group: "PartitionInspector", name: "OldestDuePerPartition", partitions: 4, run: pstatsOldestDue[Tx]},
		{group: "PartitionInspector", name: "CountsAddUpToStats", partitions: 4, run: pstatsAddUp[Tx]},
		{group: "PartitionInspector", name: "HeldLeaseShowsOwnerVersionAndExpiry", partitions: 3, run: pstatsHeldLease[Tx]},
		{group: "PartitionInspector", name: "ReleasedOrExpiredLeaseHasNoOwner", partitions: 2, run: pstatsFreedLease[Tx]},
		{group: "PartitionInspector", name: "FailsAfterClose", run: pstatsClosed[Tx]},
		{group: "PartitionInspector", name: "CancelledContextReturnsItsError", run: pstatsCancelled[Tx]},
	}
}

func (s *env[Tx]) partitionInspector(t *testing.T) outbox.PartitionInspector {
	t.Helper()
	pi, ok := s.b.(outbox.PartitionInspector)
	if !ok {
		t.Skipf("the backend (%T) does not implement outbox.PartitionInspector", s.b)
	}
	return pi
}

// partitionStats calls PartitionStats or fails the case. It checks what
// holds for every result: one element per partition, in partition order,
// each naming its partition, and a lease (when there is one) of that
// partition.
func (s *env[Tx]) partitionStats(t *testing.T, pi outbox.PartitionInspector) []outbox.PartitionStats {
	t.Helper()
	got, err := pi.PartitionStats(s.ctx)
	if err != nil {
		t.Fatalf("PartitionStats: %v", err)
	}
	if len(got) != s.parts {
		t.Fatalf("PartitionStats returned %d elements %s for an outbox of %d partitions: want one per partition, in order, idle partitions included", len(got), fmtPartitionStats(got), s.parts)
	}
	for i, ps := range got {
		if ps.Partition != i {
			t.Fatalf("PartitionStats returned %s: element %d is partition %d; want partitions 0..%d in order", fmtPartitionStats(got), i, ps.Partition, s.parts-1)
		}
		if ps.Lease.Owner != "" && ps.Lease.Partition != i {
			t.Fatalf("PartitionStats returned %s: the lease of partition %d names partition %d", fmtPartitionStats(got), i, ps.Lease.Partition)
		}
	}
	return got
}

func fmtPartitionStats(ps []outbox.PartitionStats) string {
	parts := make([]string, len(ps))
	for i, p := range ps {
		lease := "free"
		if p.Lease.Owner != "" {
			lease = fmtLease(p.Lease)
		}
		parts[i] = fmt.Sprintf("{partition %d: pending %d, due %d, parked %d, oldest due %s, %s}",
			p.Partition, p.Pending, p.Due, p.Parked, fmtTime(p.OldestDue), lease)
	}
	return "[" + strings.Join(parts, " ") + "]"
}

func fmtTime(at time.Time) string {
	if at.IsZero() {
		return "zero"
	}
	return at.Format(time.StampMilli)
}

// keysIn returns n distinct keys of partition p of an outbox of parts
// partitions.
func keysIn(p, parts, n int) []string {
	var keys []string
	for i := 0; len(keys) < n; i++ {
		if k := fmt.Sprintf("key-%d", i); outbox.PartitionOf(k, parts) == p {
			keys = append(keys, k)
		}
	}
	return keys
}

// partitionWant is what PartitionStats must report for one partition of
// partitionFixture.
type partitionWant struct {
	// holds describes the partition's entries, for messages.
	holds           string
	pending, parked int64
	// dueMin and dueMax bound Due: a claimed entry may or may not count as
	// due, as the backend chooses.
	dueMin, dueMax int64
	// oldestFrom and oldestTo bound OldestDue when Due is not zero.
	oldestFrom, oldestTo time.Time
}

// partitionFixture fills the 4 partitions of the case with a different
// mix of entries each, holding a lease with longTTL on every partition it
// fetched from, and returns what PartitionStats must report for each.
// Every entry has a key of its own (b1 none), so none is held back, and
// every due time is an hour or more from now, so the counts stay as they
// are while the case looks at them.
func (s *env[Tx]) partitionFixture(t *testing.T) []partitionWant {
	t.Helper()
	if s.parts != 4 {
		t.Fatalf("partitionFixture needs 4 partitions, the case has %d", s.parts)
	}
	// b1, retried with a negative Delay, has no key: the case is about
	// where counts are reported, not about the order of a key's retries.
	if p := outbox.PartitionOf("", s.parts); p != 1 {
		t.Fatalf("partitionFixture expects entries without a key in partition 1, PartitionOf(\"\", %d) is %d", s.parts, p)
	}
	key := func(p, i int) string { return keysIn(p, s.parts, i+1)[i] }
	hourAhead := time.Now().Add(time.Hour)
	scheduled := func(id, key string) outbox.Entry {
		e := entry(id, key)
		e.NotBefore = hourAhead
		return e
	}
	appended := time.Now()
	s.appendCommit(t,
		entry("a1", key(0, 0)),
		entry("b1", ""), entry("b2", key(1, 1)), scheduled("b3", key(1, 2)),
		entry("c1", key(2, 0)), entry("c2", key(2, 1)), entry("c3", key(2, 2)),
		entry("d1", key(3, 0)), entry("d2", key(3, 1)), scheduled("d3", key(3, 2)),
	)
	committed := time.Now()

	l1 := s.acquire(t, 1, s.owner("relay"), longTTL)
	expectIDs(t, "fetch of partition 1", s.fetch(t, l1, 10), "b1", "b2")
	failedAt := time.Now()
	s.markFailed(t, l1, outbox.Failure{ID: "b1", Error: "boom", Delay: -time.Hour})
	failedBy := time.Now()
	s.release(t, l1, "b2")

	l2 := s.acquire(t, 2, s.owner("relay"), longTTL)
	expectIDs(t, "fetch of partition 2", s.fetch(t, l2, 10), "c1", "c2", "c3")
	s.markFailed(t, l2,
		outbox.Failure{ID: "c1", Error: "poison", Park: true},
		outbox.Failure{ID: "c2", Error: "boom", Delay: time.Hour},
	)
	// c3 stays claimed by l2.

	l3 := s.acquire(t, 3, s.owner("relay"), longTTL)
	expectIDs(t, "fetch of partition 3", s.fetch(t, l3, 10), "d1", "d2")
	s.markFailed(t, l3,
		outbox.Failure{ID: "d1", Error: "poison", Park: true},
		outbox.Failure{ID: "d2", Error: "poison", Park: true},
	)

	appendFrom, appendTo := appended.Add(-clockSkew), committed.Add(clockSkew)
	return []partitionWant{
		{holds: "a1 due", pending: 1, dueMin: 1, dueMax: 1, oldestFrom: appendFrom, oldestTo: appendTo},
		{holds: "b1 (no key) retrying, due an hour before MarkFailed; b2 due; b3 scheduled an hour ahead", pending: 3, dueMin: 2, dueMax: 2,
			oldestFrom: failedAt.Add(-time.Hour - clockSkew), oldestTo: failedBy.Add(-time.Hour + clockSkew)},
		{holds: "c1 parked; c2 retrying in an hour; c3 claimed (due, which may or may not count as due while claimed)", pending: 2, parked: 1, dueMin: 0, dueMax: 1,
			oldestFrom: appendFrom, oldestTo: appendTo},
		{holds: "d1, d2 parked; d3 scheduled an hour ahead", pending: 1, parked: 2},
	}
}

func pstatsOrder[Tx any](t *testing.T, s *env[Tx]) {
	pi := s.partitionInspector(t)
	// partitionStats checks the length and the order.
	for _, ps := range s.partitionStats(t, pi) {
		if ps.Stats != (outbox.Stats{}) || ps.Lease.Owner != "" {
			t.Errorf("partition %d of an empty outbox that nobody leased: got %s, want zero counts and no lease owner", ps.Partition, fmtPartitionStats([]outbox.PartitionStats{ps}))
		}
	}
}

func pstatsCounts[Tx any](t *testing.T, s *env[Tx]) {
	pi := s.partitionInspector(t)
	want := s.partitionFixture(t)
	got := s.partitionStats(t, pi)
	for p, w := range want {
		g := got[p]
		if g.Pending != w.pending || g.Parked != w.parked || g.Due < w.dueMin || g.Due > w.dueMax {
			due := fmt.Sprint(w.dueMin)
			if w.dueMax != w.dueMin {
				due = fmt.Sprintf("%d..%d", w.dueMin, w.dueMax)
			}
			t.Errorf("partition %d holds %s: got Pending %d, Due %d, Parked %d; want Pending %d (claimed, scheduled and retrying entries are pending), Due %s, Parked %d",
				p, w.holds, g.Pending, g.Due, g.Parked, w.pending, due, w.parked)
		}
	}
	if t.Failed() {
		t.Logf("PartitionStats: %s", fmtPartitionStats(got))
	}
}

func pstatsOldestDue[Tx any](t *testing.T, s *env[Tx]) {
	pi := s.partitionInspector(t)
	want := s.partitionFixture(t)
	got := s.partitionStats(t, pi)
	for p, w := range want {
		g := got[p]
		mustBeSet := w.dueMin > 0 || (w.dueMax > 0 && g.Due > 0)
		switch {
		case mustBeSet && (g.OldestDue.Before(w.oldestFrom) || g.OldestDue.After(w.oldestTo)):
			t.Errorf("partition %d holds %s and reports Due %d: got OldestDue %s, want the due time of its oldest due entry, between %s and %s",
				p, w.holds, g.Due, fmtTime(g.OldestDue), fmtTime(w.oldestFrom), fmtTime(w.oldestTo))
		case !mustBeSet && !g.OldestDue.IsZero():
			t.Errorf("partition %d holds %s and reports Due %d: got OldestDue %s, want zero (no entry of the partition is due)",
				p, w.holds, g.Due, fmtTime(g.OldestDue))
		}
	}
	if t.Failed() {
		t.Logf("PartitionStats: %s", fmtPartitionStats(got))
	}
}

func pstatsAddUp[Tx any](t *testing.T, s *env[Tx]) {
	pi := s.partitionInspector(t)
	in, ok := s.b.(outbox.Inspector)
	if !ok {
		t.Skipf("the backend (%T) implements outbox.PartitionInspector but not outbox.Inspector, so there are no Stats for the partitions to add up to", s.b)
	}
	s.partitionFixture(t)
	got := s.partitionStats(t, pi)
	st, err := in.Stats(s.ctx)
	if err != nil {
		t.Fatalf("Stats: %v", err)
	}
	var sum outbox.Stats
	for _, ps := range got {
		sum.Pending += ps.Pending
		sum.Due += ps.Due
		sum.Parked += ps.Parked
		if !ps.OldestDue.IsZero() && (sum.OldestDue.IsZero() || ps.OldestDue.Before(sum.OldestDue)) {
			sum.OldestDue = ps.OldestDue
		}
	}
	if sum.Pending != st.Pending || sum.Due != st.Due || sum.Parked != st.Parked {
		t.Errorf("the partitions add up to Pending %d, Due %d, Parked %d, but Stats reports Pending %d, Due %d, Parked %d (nothing changed between the calls)\nPartitionStats: %s",
			sum.Pending, sum.Due, sum.Parked, st.Pending, st.Due, st.Parked, fmtPartitionStats(got))
	}
	if d := sum.OldestDue.Sub(st.OldestDue); sum.OldestDue.IsZero() != st.OldestDue.IsZero() || d < -time.Millisecond || d > time.Millisecond {
		t.Errorf("the oldest OldestDue of the partitions is %s, but Stats reports OldestDue %s; want the same time (within 1ms)\nPartitionStats: %s",
			fmtTime(sum.OldestDue), fmtTime(st.OldestDue), fmtPartitionStats(got))
	}
}

// expectLease fails the case unless ps shows l, with an expiry at least
// ttl after from and at most ttl after to (allowing clockSkew).
func expectLease(t *testing.T, what string, got []outbox.PartitionStats, l outbox.Lease, ttl time.Duration, from, to time.Time) {
	t.Helper()
	g := got[l.Partition].Lease
	if g.Owner != l.Owner || g.Version != l.Version {
		t.Fatalf("%s: partition %d shows %s, want %s\nPartitionStats: %s", what, l.Partition, fmtLease(g), fmtLease(l), fmtPartitionStats(got))
	}
	earliest, latest := from.Add(ttl-clockSkew), to.Add(ttl+clockSkew)
	if g.Expires.Before(earliest) || g.Expires.After(latest) {
		t.Fatalf("%s: %s expires at %s; want its expiry by the store's clock (granted with ttl %v: between %s and %s)",
			what, fmtLease(g), fmtTime(g.Expires), ttl, fmtTime(earliest), fmtTime(latest))
	}
}

// expectFree fails the case unless partition p shows no lease owner.
func expectFree(t *testing.T, what string, got []outbox.PartitionStats, p int) {
	t.Helper()
	if g := got[p].Lease; g.Owner != "" {
		t.Fatalf("%s: partition %d shows %s, want no lease (an empty Owner)\nPartitionStats: %s", what, p, fmtLease(g), fmtPartitionStats(got))
	}
}

func pstatsHeldLease[Tx any](t *testing.T, s *env[Tx]) {
	pi := s.partitionInspector(t)
	start := time.Now()
	la := s.acquire(t, 0, s.owner("relay-a"), longTTL)
	lb := s.acquire(t, 2, s.owner("relay-b"), longTTL)
	got := s.partitionStats(t, pi)
	end := time.Now()
	expectLease(t, "PartitionStats while relay-a holds partition 0", got, la, longTTL, start, end)
	expectLease(t, "PartitionStats while relay-b holds partition 2", got, lb, longTTL, start, end)
	expectFree(t, "PartitionStats while nobody holds partition 1", got, 1)

	// A new holder shows with its own, greater version.
	s.releaseLease(t, la)
	cStart := time.Now()
	lc := s.acquire(t, 0, s.owner("relay-c"), longTTL)
	got = s.partitionStats(t, pi)
	cEnd := time.Now()
	if lc.Version <= la.Version {
		t.Fatalf("AcquireLease after %s was released granted %s: the version must grow", fmtLease(la), fmtLease(lc))
	}
	expectLease(t, "PartitionStats after relay-c took partition 0 over from relay-a", got, lc, longTTL, cStart, cEnd)
	expectLease(t, "PartitionStats while relay-b still holds partition 2", got, lb, longTTL, start, end)
	expectFree(t, "PartitionStats while nobody holds partition 1", got, 1)
}

func pstatsFreedLease[Tx any](t *testing.T, s *env[Tx]) {
	pi := s.partitionInspector(t)
	got := s.partitionStats(t, pi)
	expectFree(t, "PartitionStats of an outbox nobody leased", got, 0)
	expectFree(t, "PartitionStats of an outbox nobody leased", got, 1)

	start := time.Now()
	l := s.acquire(t, 0, s.owner("relay"), longTTL)
	expectLease(t, "PartitionStats while the lease is held", s.partitionStats(t, pi), l, longTTL, start, time.Now())
	s.releaseLease(t, l)
	expectFree(t, fmt.Sprintf("PartitionStats after ReleaseLease(%s) returned", fmtLease(l)), s.partitionStats(t, pi), 0)

	// A lease nobody renews or releases stops showing once it expires.
	short, err := s.b.AcquireLease(s.ctx, 1, s.owner("relay"), shortTTL)
	if err != nil {
		t.Fatalf("AcquireLease(partition 1, ttl %v): %v", shortTTL, err)
	}
	deadline := time.Now().Add(shortTTL + waitLimit)
	for {
		got := s.partitionStats(t, pi)
		g := got[1].Lease
		if g.Owner == "" {
			return
		}
		if g.Owner != short.Owner || g.Version != short.Version {
			t.Fatalf("PartitionStats while waiting for %s (ttl %v) to expire shows %s, which nobody acquired\nPartitionStats: %s", fmtLease(short), shortTTL, fmtLease(g), fmtPartitionStats(got))
		}
		if time.Now().After(deadline) {
			t.Fatalf("PartitionStats still shows %s (expires %s) %v after it was granted with ttl %v: an expired lease is not live and must show an empty Owner\nPartitionStats: %s",
				fmtLease(g), fmtTime(g.Expires), shortTTL+waitLimit, shortTTL, fmtPartitionStats(got))
		}
		s.sleep(t, pollEvery)
	}
}

func pstatsClosed[Tx any](t *testing.T, s *env[Tx]) {
	pi := s.partitionInspector(t)
	s.appendCommit(t, entry("e1", "k"))
	s.partitionStats(t, pi)
	if err := s.b.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if got, err := pi.PartitionStats(s.ctx); !errors.Is(err, outbox.ErrClosed) {
		t.Errorf("PartitionStats after Close: got %s, %v; want an error wrapping ErrClosed", fmtPartitionStats(got), err)
	}
}

func pstatsCancelled[Tx any](t *testing.T, s *env[Tx]) {
	pi := s.partitionInspector(t)
	s.appendCommit(t, entry("e1", "k"))
	cctx, cancel := context.WithCancel(s.ctx)
	cancel()
	if got, err := pi.PartitionStats(cctx); !errors.Is(err, context.Canceled) {
		t.Errorf("PartitionStats with a cancelled context: got %s, %v; want an error wrapping context.Canceled", fmtPartitionStats(got), err)
	}
	dctx, dcancel := context.WithDeadline(s.ctx, time.Now().Add(-time.Second))
	defer dcancel()
	if got, err := pi.PartitionStats(dctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("PartitionStats with an expired deadline: got %s, %v; want an error wrapping context.DeadlineExceeded", fmtPartitionStats(got), err)
	}
	// The backend still answers with a live context.
	s.partitionStats(t, pi)
}
