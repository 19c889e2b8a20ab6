package conformance

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/outboxrelay/outbox"
)

func notifierCases[Tx any]() []testCase[Tx] {
	return []testCase[Tx]{
		{group: "Notifier", name: "ArrivesAfterCommit", run: notifyAfterCommit[Tx]},
		{group: "Notifier", name: "NoneForRollback", run: notifyNoneForRollback[Tx]},
		{group: "Notifier", name: "ClosedWhenContextDone", run: notifyClosedOnCtx[Tx]},
		{group: "Notifier", name: "SlowReceiverDoesNotBlockAppends", run: notifySlowReceiver[Tx]},
		{group: "Notifier", name: "CarriesThePartitionAppendedTo", partitions: 8, run: notifyPartition[Tx]},
		{group: "Notifier", name: "CarriesEveryPartitionOfATransaction", partitions: 4, run: notifyTxPartitions[Tx]},
	}
}

func cancelerCases[Tx any]() []testCase[Tx] {
	return []testCase[Tx]{
		{group: "Canceler", name: "CancelsPendingAndScheduled", run: cancelPending[Tx]},
		{group: "Canceler", name: "CancelsParked", run: cancelParked[Tx]},
		{group: "Canceler", name: "SentIsNotFound", run: cancelSent[Tx]},
		{group: "Canceler", name: "CancelledClaimNeverComesBack", run: cancelClaimed[Tx]},
	}
}

func inspectorCases[Tx any]() []testCase[Tx] {
	return []testCase[Tx]{
		{group: "Inspector", name: "StatsCounts", run: inspectStats[Tx]},
		{group: "Inspector", name: "ParkedListsByIDInPages", run: inspectParked[Tx]},
		{group: "Inspector", name: "RequeueResetsAttemptsDueNow", run: inspectRequeue[Tx]},
		{group: "Inspector", name: "RequeuedEntryOrderedAsIfAppendedNow", run: inspectRequeueOrder[Tx]},
	}
}

func (s *env[Tx]) notifier(t *testing.T) outbox.Notifier {
	t.Helper()
	n, ok := s.b.(outbox.Notifier)
	if !ok {
		t.Skipf("the backend (%T) does not implement outbox.Notifier", s.b)
	}
	return n
}

func (s *env[Tx]) canceler(t *testing.T) outbox.Canceler {
	t.Helper()
	c, ok := s.b.(outbox.Canceler)
	if !ok {
		t.Skipf("the backend (%T) does not implement outbox.Canceler", s.b)
	}
	return c
}

func (s *env[Tx]) inspector(t *testing.T) outbox.Inspector {
	t.Helper()
	in, ok := s.b.(outbox.Inspector)
	if !ok {
		t.Skipf("the backend (%T) does not implement outbox.Inspector", s.b)
	}
	return in
}

// drainFor empties ch for d, returning the values it got and whether the
// channel was closed.
func drainFor(ch <-chan int, d time.Duration) (got []int, closed bool) {
	timer := time.NewTimer(d)
	defer timer.Stop()
	for {
		select {
		case v, ok := <-ch:
			if !ok {
				return got, true
			}
			got = append(got, v)
		case <-timer.C:
			return got, false
		}
	}
}

// awaitNotification commits appends until ch receives a value (the first
// append may race with the backend setting up its subscription), failing
// the case after waitLimit.
func (s *env[Tx]) awaitNotification(t *testing.T, ch <-chan int, prefix string) {
	t.Helper()
	deadline := time.Now().Add(waitLimit)
	for i := 0; ; i++ {
		s.appendCommit(t, entry(fmt.Sprintf("%s-%d", prefix, i), ""))
		got, closed := drainFor(ch, 250*time.Millisecond)
		if closed {
			t.Fatal("the Notifications channel was closed while its context is live")
		}
		if len(got) > 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no notification within %v of %d committed appends", waitLimit, i+1)
		}
	}
}

func notifyAfterCommit[Tx any](t *testing.T, s *env[Tx]) {
	n := s.notifier(t)
	ch, err := n.Notifications(s.ctx)
	if err != nil {
		t.Fatalf("Notifications: %v", err)
	}
	tx := s.begin(t)
	if err := s.b.AppendInTx(s.ctx, tx, entry("e1", "k")); err != nil {
		t.Fatalf("AppendInTx: %v", err)
	}
	if got, _ := drainFor(ch, 200*time.Millisecond); len(got) > 0 {
		_ = s.h.Rollback(s.ctx, tx)
		t.Fatalf("got notifications %v while the appending transaction was still open; they must come after commit", got)
	}
	if err := s.h.Commit(s.ctx, tx); err != nil {
		t.Fatalf("Harness.Commit: %v", err)
	}
	if got, _ := drainFor(ch, 2*time.Second); len(got) > 0 {
		return
	}
	// The subscription may have been set up late; commit more.
	s.awaitNotification(t, ch, "more")
}

func notifyNoneForRollback[Tx any](t *testing.T, s *env[Tx]) {
	n := s.notifier(t)
	ch, err := n.Notifications(s.ctx)
	if err != nil {
		t.Fatalf("Notifications: %v", err)
	}
	s.awaitNotification(t, ch, "live")
	// Notifications of the appends above may still be on their way.
	drainQuiet(t, ch, 500*time.Millisecond)
	tx := s.begin(t)
	if err := s.b.AppendInTx(s.ctx, tx, entry("rolled-back", "k")); err != nil {
		t.Fatalf("AppendInTx: %v", err)
	}
	if err := s.h.Rollback(s.ctx, tx); err != nil {
		t.Fatalf("Harness.Rollback: %v", err)
	}
	if got, _ := drainFor(ch, 500*time.Millisecond); len(got) > 0 {
		t.Fatalf("got notifications %v after a transaction that appended entries rolled back; want none", got)
	}
}

func notifyClosedOnCtx[Tx any](t *testing.T, s *env[Tx]) {
	n := s.notifier(t)
	ctx, cancel := context.WithCancel(s.ctx)
	ch, err := n.Notifications(ctx)
	if err != nil {
		t.Fatalf("Notifications: %v", err)
	}
	cancel()
	if _, closed := drainFor(ch, waitLimit); !closed {
		t.Fatalf("the Notifications channel was not closed %v after its context was cancelled", waitLimit)
	}
}

func notifySlowReceiver[Tx any](t *testing.T, s *env[Tx]) {
	n := s.notifier(t)
	ch, err := n.Notifications(s.ctx)
	if err != nil {
		t.Fatalf("Notifications: %v", err)
	}
	// Nobody reads ch while 50 transactions commit: the appends must not
	// block (the case's watchdog catches a hang).
	for i := range 50 {
		s.appendCommit(t, entry(fmt.Sprintf("e%02d", i), ""))
	}
	if got, _ := drainFor(ch, 2*time.Second); len(got) == 0 {
		s.awaitNotification(t, ch, "after")
	}
}

// checkNotified fails the case unless every value in got is a partition of
// the outbox or AllPartitions.
func (s *env[Tx]) checkNotified(t *testing.T, got []int) {
	t.Helper()
	for _, v := range got {
		if v != outbox.AllPartitions && (v < 0 || v >= s.parts) {
			t.Fatalf("the Notifications channel sent %d (all values %v): want a partition in [0, %d) or outbox.AllPartitions (%d)", v, got, s.parts, outbox.AllPartitions)
		}
	}
}

// notifyPartition commits an append to each partition in turn and waits
// for a notification naming that partition, or AllPartitions. Values for
// other partitions (late ones of earlier commits) do not count. The commit
// is repeated while nothing matching arrives, as notifications may be
// lost; a backend that never names the partition within waitLimit fails.
func notifyPartition[Tx any](t *testing.T, s *env[Tx]) {
	n := s.notifier(t)
	ch, err := n.Notifications(s.ctx)
	if err != nil {
		t.Fatalf("Notifications: %v", err)
	}
	for p, key := range keysByPartition(s.parts) {
		var got []int
		deadline := time.Now().Add(waitLimit)
		for i := 0; ; i++ {
			s.appendCommit(t, entry(fmt.Sprintf("p%d-%d", p, i), key))
			vals, closed := drainUntil(ch, 250*time.Millisecond, func(v int) bool { return v == p || v == outbox.AllPartitions })
			if closed {
				t.Fatal("the Notifications channel was closed while its context is live")
			}
			got = append(got, vals...)
			s.checkNotified(t, got)
			if slices.Contains(vals, p) || slices.Contains(vals, outbox.AllPartitions) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%d commits appended to partition %d (key %q, PartitionOf(key, %d) = %d) were notified only as %v: a notification must name the partition appended to, or be outbox.AllPartitions",
					i+1, p, key, s.parts, p, got)
			}
		}
	}
}

// notifyTxPartitions commits one transaction that appends to every
// partition and waits until each partition has been named (or
// AllPartitions was sent), committing such a transaction again while
// nothing new arrives, as notifications may be lost.
func notifyTxPartitions[Tx any](t *testing.T, s *env[Tx]) {
	n := s.notifier(t)
	ch, err := n.Notifications(s.ctx)
	if err != nil {
		t.Fatalf("Notifications: %v", err)
	}
	keys := keysByPartition(s.parts)
	missing := make(map[int]bool, s.parts)
	for p := range s.parts {
		missing[p] = true
	}
	var got []int
	deadline := time.Now().Add(waitLimit)
	for i := 0; ; i++ {
		var es []outbox.Entry
		for p, key := range keys {
			es = append(es, entry(fmt.Sprintf("t%d-p%d", i, p), key))
		}
		s.appendCommit(t, es...)
		vals, closed := drainUntil(ch, 500*time.Millisecond, func(v int) bool {
			delete(missing, v)
			return len(missing) == 0 || v == outbox.AllPartitions
		})
		if closed {
			t.Fatal("the Notifications channel was closed while its context is live")
		}
		got = append(got, vals...)
		s.checkNotified(t, got)
		if len(missing) == 0 || slices.Contains(vals, outbox.AllPartitions) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d transactions, each appending to all %d partitions, were notified only as %v; partitions %v were never named: a transaction's notification names every partition it appended to (one value each), or is outbox.AllPartitions",
				i+1, s.parts, got, slices.Sorted(maps.Keys(missing)))
		}
	}
}

// drainUntil receives from ch until done accepts a value, d passes or ch
// is closed, returning the values it got.
func drainUntil(ch <-chan int, d time.Duration, done func(int) bool) (got []int, closed bool) {
	timer := time.NewTimer(d)
	defer timer.Stop()
	for {
		select {
		case v, ok := <-ch:
			if !ok {
				return got, true
			}
			got = append(got, v)
			if done(v) {
				return got, false
			}
		case <-timer.C:
			return got, false
		}
	}
}

func cancelPending[Tx any](t *testing.T, s *env[Tx]) {
	c := s.canceler(t)
	sched := entry("scheduled", "k")
	sched.NotBefore = time.Now().Add(time.Hour)
	s.appendCommit(t, entry("e1", "k"), sched, entry("e2", "k"))
	if err := c.Cancel(s.ctx, "e1"); err != nil {
		t.Fatalf("Cancel of pending e1: %v", err)
	}
	if err := c.Cancel(s.ctx, "scheduled"); err != nil {
		t.Fatalf("Cancel of a scheduled entry: %v", err)
	}
	expectErr(t, "Cancel of e1 a second time", c.Cancel(s.ctx, "e1"), outbox.ErrNotFound)
	expectErr(t, "Cancel of an ID never appended", c.Cancel(s.ctx, "never"), outbox.ErrNotFound)
	expectIDs(t, "pending entries after cancelling e1 and the scheduled entry", s.peek(t, 0), "e2")
	if in, ok := s.b.(outbox.Inspector); ok {
		st, err := in.Stats(s.ctx)
		if err != nil {
			t.Fatalf("Stats: %v", err)
		}
		if st.Pending != 1 {
			t.Fatalf("Stats.Pending = %d after cancelling 2 of 3 entries, want 1", st.Pending)
		}
	}
}

func cancelParked[Tx any](t *testing.T, s *env[Tx]) {
	c := s.canceler(t)
	s.appendCommit(t, entry("e1", "k"))
	l := s.acquire(t, 0, s.owner("relay"), longTTL)
	expectIDs(t, "first fetch", s.fetch(t, l, 10), "e1")
	s.markFailed(t, l, outbox.Failure{ID: "e1", Error: "poison", Park: true})
	if err := c.Cancel(s.ctx, "e1"); err != nil {
		t.Fatalf("Cancel of parked e1: %v", err)
	}
	expectErr(t, "Cancel of parked e1 a second time", c.Cancel(s.ctx, "e1"), outbox.ErrNotFound)
	if in, ok := s.b.(outbox.Inspector); ok {
		parked, err := in.Parked(s.ctx, "", 10)
		if err != nil {
			t.Fatalf("Parked: %v", err)
		}
		expectIDs(t, "Parked after cancelling the parked entry", parked)
		if n, err := in.Requeue(s.ctx, "e1"); n != 0 || err != nil {
			t.Fatalf("Requeue of the cancelled e1: got %d, %v; want 0, nil", n, err)
		}
	}
	expectIDs(t, "fetch after cancelling the parked entry", s.fetch(t, l, 10))
}

func cancelSent[Tx any](t *testing.T, s *env[Tx]) {
	c := s.canceler(t)
	s.appendCommit(t, entry("e1", "k"))
	l := s.acquire(t, 0, s.owner("relay"), longTTL)
	expectIDs(t, "first fetch", s.fetch(t, l, 10), "e1")
	s.markSent(t, l, "e1")
	expectErr(t, "Cancel of a sent entry", c.Cancel(s.ctx, "e1"), outbox.ErrNotFound)
}

func cancelClaimed[Tx any](t *testing.T, s *env[Tx]) {
	c := s.canceler(t)
	s.appendCommit(t, entry("e1", "k"), entry("e2", "k"), entry("f1", ""))
	l := s.acquire(t, 0, s.owner("relay"), longTTL)
	expectIDs(t, "first fetch", s.fetch(t, l, 10), "e1", "e2", "f1")
	if err := c.Cancel(s.ctx, "e1"); err != nil {
		t.Fatalf("Cancel of e1 while claimed: %v", err)
	}
	if err := c.Cancel(s.ctx, "f1"); err != nil {
		t.Fatalf("Cancel of f1 while claimed: %v", err)
	}
	// The relay's outcomes for the cancelled entries must not bring them
	// back.
	if err := s.b.MarkFailed(s.ctx, l, []outbox.Failure{{ID: "e1", Error: "late", Delay: 0}}); err != nil {
		t.Fatalf("MarkFailed of the cancelled e1: got %v, want nil (unknown IDs are ignored)", err)
	}
	s.release(t, l, "f1", "e2")
	s.releaseLease(t, l)
	expectIDs(t, "pending entries after cancelling claimed e1 and f1 (once Cancel returns nil they are never fetched again, and e1 holds nothing back)", s.peek(t, 0), "e2")
}

func inspectStats[Tx any](t *testing.T, s *env[Tx]) {
	in := s.inspector(t)
	st, err := in.Stats(s.ctx)
	if err != nil {
		t.Fatalf("Stats: %v", err)
	}
	if st != (outbox.Stats{}) {
		t.Fatalf("Stats of an empty outbox = %+v, want all zero", st)
	}
	s.appendCommit(t, entry("x", "k-x"))
	l := s.acquire(t, 0, s.owner("relay"), longTTL)
	expectIDs(t, "first fetch", s.fetch(t, l, 10), "x")
	s.markFailed(t, l, outbox.Failure{ID: "x", Error: "poison", Park: true})
	start := time.Now()
	sched := entry("s1", "k-s")
	sched.NotBefore = start.Add(time.Hour)
	s.appendCommit(t, entry("p1", "k"), entry("p2", "k"), sched, entry("p3", ""))
	st, err = in.Stats(s.ctx)
	if err != nil {
		t.Fatalf("Stats: %v", err)
	}
	if st.Pending != 4 || st.Due != 3 || st.Parked != 1 {
		t.Fatalf("Stats = %+v with 3 due entries, 1 scheduled an hour ahead and 1 parked; want Pending 4, Due 3, Parked 1", st)
	}
	if st.OldestDue.Before(start.Add(-time.Minute)) || st.OldestDue.After(time.Now().Add(time.Minute)) {
		t.Fatalf("Stats.OldestDue = %v, want the due time of p1 (appended at about %v)", st.OldestDue, start)
	}
	expectIDs(t, "fetch", s.fetch(t, l, 10), "p1", "p2", "p3")
	st, err = in.Stats(s.ctx)
	if err != nil {
		t.Fatalf("Stats: %v", err)
	}
	if st.Pending != 4 || st.Parked != 1 {
		t.Fatalf("Stats = %+v while p1..p3 are claimed; want Pending 4 (claimed entries are pending), Parked 1", st)
	}
	s.markSent(t, l, "p1", "p2", "p3")
	st, err = in.Stats(s.ctx)
	if err != nil {
		t.Fatalf("Stats: %v", err)
	}
	if st.Pending != 1 || st.Due != 0 || st.Parked != 1 || !st.OldestDue.IsZero() {
		t.Fatalf("Stats = %+v with only a scheduled and a parked entry; want Pending 1, Due 0, Parked 1, zero OldestDue", st)
	}
}

func inspectParked[Tx any](t *testing.T, s *env[Tx]) {
	in := s.inspector(t)
	names := []string{"p-5", "p-1", "p-7", "p-3", "p-2", "p-6", "p-4"}
	var es []outbox.Entry
	for _, n := range names {
		es = append(es, entry(n, "k-"+n))
	}
	s.appendCommit(t, append(es, entry("pending", "k"))...)
	l := s.acquire(t, 0, s.owner("relay"), longTTL)
	got := s.fetch(t, l, 100)
	var fs []outbox.Failure
	for _, n := range names {
		fs = append(fs, outbox.Failure{ID: n, Error: "poison " + n, Park: true})
	}
	s.markFailed(t, l, fs...)
	s.release(t, l, "pending")
	if len(got) != len(names)+1 {
		t.Fatalf("fetched %v, want all %d entries", ids(got), len(names)+1)
	}
	if _, err := in.Parked(s.ctx, "", 0); !errors.Is(err, outbox.ErrInvalidArgument) {
		t.Errorf("Parked with limit 0: got %v, want an error wrapping ErrInvalidArgument", err)
	}
	want := slices.Clone(names)
	slices.Sort(want)
	var all []string
	after := ""
	for page := 0; ; page++ {
		p, err := in.Parked(s.ctx, after, 3)
		if err != nil {
			t.Fatalf("Parked(after %q, 3): %v", after, err)
		}
		if len(p) > 3 {
			t.Fatalf("Parked(after %q, 3) returned %d entries", after, len(p))
		}
		if len(p) == 0 {
			break
		}
		for _, e := range p {
			if d := sameEntry(entry(e.ID, "k-"+e.ID), e); d != "" {
				t.Errorf("parked entry %s does not match what was appended: %s", e.ID, d)
			}
			if e.Attempts != 1 || e.LastError != "poison "+e.ID {
				t.Errorf("parked entry %s has Attempts %d, LastError %q; want 1, %q", e.ID, e.Attempts, e.LastError, "poison "+e.ID)
			}
		}
		all = append(all, ids(p)...)
		after = p[len(p)-1].ID
		if page > len(names) {
			t.Fatalf("Parked pagination does not end: pages so far %v", all)
		}
	}
	if !slices.Equal(all, want) {
		t.Fatalf("Parked pages of 3 listed %v, want %v (ordered by ID, each page after the last ID of the previous, pending entries excluded)", all, want)
	}
}

func inspectRequeue[Tx any](t *testing.T, s *env[Tx]) {
	in := s.inspector(t)
	s.appendCommit(t, entry("a", "k"), entry("b", ""), entry("pending", "j"))
	l := s.acquire(t, 0, s.owner("relay"), longTTL)
	expectIDs(t, "first fetch", s.fetch(t, l, 10), "a", "b", "pending")
	s.markFailed(t, l,
		outbox.Failure{ID: "a", Error: "poison a", Park: true},
		outbox.Failure{ID: "b", Error: "poison b", Park: true},
	)
	s.release(t, l, "pending")
	s.appendCommit(t, entry("c", "k2"))
	n, err := in.Requeue(s.ctx, "a", "unknown", "pending", "b")
	if err != nil || n != 2 {
		t.Fatalf("Requeue(a, unknown, pending, b) with a and b parked: got %d, %v; want 2, nil", n, err)
	}
	if n, err := in.Requeue(s.ctx, "a", "b"); err != nil || n != 0 {
		t.Fatalf("Requeue of entries requeued already: got %d, %v; want 0, nil", n, err)
	}
	parked, err := in.Parked(s.ctx, "", 10)
	if err != nil {
		t.Fatalf("Parked: %v", err)
	}
	expectIDs(t, "Parked after requeueing everything", parked)
	got := s.fetch(t, l, 10)
	// pending and c were due before the requeue, a and b are due at it.
	expectIDs(t, "fetch after requeueing a and b (due now: after the entries already due)", got, "pending", "c", "a", "b")
	for _, e := range got[2:] {
		if e.Attempts != 0 || e.LastError != "poison "+e.ID {
			t.Errorf("requeued %s has Attempts %d, LastError %q; want 0 and the kept %q", e.ID, e.Attempts, e.LastError, "poison "+e.ID)
		}
	}
}

func inspectRequeueOrder[Tx any](t *testing.T, s *env[Tx]) {
	in := s.inspector(t)
	s.appendCommit(t, entry("e1", "k"), entry("e2", "k"), entry("e3", "k"), entry("u1", ""))
	l := s.acquire(t, 0, s.owner("relay"), longTTL)
	expectIDs(t, "first fetch", s.fetch(t, l, 1), "e1")
	s.markFailed(t, l, outbox.Failure{ID: "e1", Error: "poison", Park: true})
	expectIDs(t, "fetch after parking e1", s.fetch(t, l, 10), "e2", "e3", "u1")
	s.release(t, l, "e2", "e3", "u1")
	if n, err := in.Requeue(s.ctx, "e1"); err != nil || n != 1 {
		t.Fatalf("Requeue(e1) with e1 parked: got %d, %v; want 1, nil", n, err)
	}
	s.appendCommit(t, entry("e4", "k"))
	expectIDs(t, "fetch after requeueing e1 while e2, e3 of its key were pending (as if appended now: after them, before e4 appended later)", s.fetch(t, l, 10), "e2", "e3", "u1", "e1", "e4")
	// e2 now precedes e1 in key k's order, so e2 failing holds e1 back
	// like any later entry of its key.
	s.markFailed(t, l, outbox.Failure{ID: "e2", Error: "boom", Delay: -time.Hour})
	s.release(t, l, "e3", "u1", "e1", "e4")
	expectIDs(t, "fetch while e2 is failing (retry due an hour ago): it holds back e3, the requeued e1 and e4", s.fetch(t, l, 10), "e2", "u1")
	s.markSent(t, l, "e2", "u1")
	expectIDs(t, "fetch after e2 was sent", s.fetch(t, l, 10), "e3", "e1", "e4")
}
