package conformance

import (
	"errors"
	"fmt"
	"regexp"
	"testing"

	"github.com/outboxrelay/outbox"
)

// partitionCountCases pin the partition count stored with the outbox: a
// backend's constructor reads it (configured 0), accepts the same count
// and refuses any other with an [outbox.PartitionMismatchError]. They
// need the harness to implement [Reopener] and are skipped, saying so,
// when it does not.
func partitionCountCases[Tx any]() []testCase[Tx] {
	return []testCase[Tx]{
		{group: "PartitionCount", name: "ReopenWithSameCount", partitions: 6, run: reopenSame[Tx]},
		{group: "PartitionCount", name: "ReopenWithZeroReadsStoredCount", partitions: 6, run: reopenZero[Tx]},
		{group: "PartitionCount", name: "ReopenWithOtherCountRefused", partitions: 6, run: reopenOther[Tx]},
		{group: "PartitionCount", name: "EntriesFetchedThroughReopenedStore", partitions: 6, run: reopenEntries[Tx]},
	}
}

func (s *env[Tx]) reopener(t *testing.T) Reopener {
	t.Helper()
	r, ok := s.h.(Reopener)
	if !ok {
		t.Skipf("the harness (%T) does not implement conformance.Reopener, so the suite cannot open its outbox a second time", s.h)
	}
	return r
}

// reopen opens the outbox again configured with partitions, failing the
// case on an error; the case's cleanup closes the store (Close is
// idempotent, so the case may close it earlier).
func (s *env[Tx]) reopen(t *testing.T, r Reopener, partitions int) outbox.Store {
	t.Helper()
	st, err := r.Reopen(s.ctx, partitions)
	if err != nil {
		t.Fatalf("Reopen(%d) of an outbox created with %d partitions: %v", partitions, s.parts, err)
	}
	if st == nil {
		t.Fatalf("Reopen(%d) returned a nil store and no error", partitions)
	}
	t.Cleanup(func() {
		if err := st.Close(); err != nil {
			t.Errorf("Close of the store from Reopen(%d): %v", partitions, err)
		}
	})
	return st
}

// expectStillWorks fails the case unless the harness's backend appends
// and fetches: closing another store of the same outbox must not close it.
func (s *env[Tx]) expectStillWorks(t *testing.T, id string) {
	t.Helper()
	s.appendCommit(t, entry(id, keysByPartition(s.parts)[0]))
	expectIDs(t, "the first store's pending entries of partition 0 after a reopened store was closed (closing one store of an outbox leaves the others working)", only(s.peek(t, 0), id), id)
}

func reopenSame[Tx any](t *testing.T, s *env[Tx]) {
	r := s.reopener(t)
	st := s.reopen(t, r, s.parts)
	if got := st.Partitions(); got != s.parts {
		t.Fatalf("Reopen(%d) of an outbox created with %d partitions: Partitions() = %d", s.parts, s.parts, got)
	}
	if err := st.Close(); err != nil {
		t.Fatalf("Close of the reopened store: %v", err)
	}
	s.expectStillWorks(t, "after-close")
}

func reopenZero[Tx any](t *testing.T, s *env[Tx]) {
	r := s.reopener(t)
	st := s.reopen(t, r, 0)
	if got := st.Partitions(); got != s.parts {
		t.Fatalf("Reopen(0) of an outbox created with %d partitions: Partitions() = %d, want the stored count", s.parts, got)
	}
}

func reopenOther[Tx any](t *testing.T, s *env[Tx]) {
	r := s.reopener(t)
	for _, configured := range []int{s.parts + 5, s.parts / 2, 1} {
		st, err := r.Reopen(s.ctx, configured)
		if err == nil {
			n := st.Partitions()
			_ = st.Close()
			t.Fatalf("Reopen(%d) of an outbox created with %d partitions succeeded (Partitions() = %d); want a *outbox.PartitionMismatchError", configured, s.parts, n)
		}
		var mismatch *outbox.PartitionMismatchError
		if !errors.As(err, &mismatch) {
			t.Fatalf("Reopen(%d) of an outbox created with %d partitions: got %v (%T), want an error for which errors.As(err, *outbox.PartitionMismatchError) holds", configured, s.parts, err, err)
		}
		if mismatch.Configured != configured || mismatch.Stored != s.parts {
			t.Errorf("Reopen(%d) of an outbox created with %d partitions: PartitionMismatchError{Configured: %d, Stored: %d}, want Configured %d, Stored %d",
				configured, s.parts, mismatch.Configured, mismatch.Stored, configured, s.parts)
		}
		if !errors.Is(err, outbox.ErrInvalidArgument) {
			t.Errorf("Reopen(%d) of an outbox created with %d partitions: %v does not wrap ErrInvalidArgument", configured, s.parts, err)
		}
		for _, n := range []int{configured, s.parts} {
			if !regexp.MustCompile(fmt.Sprintf(`\b%d\b`, n)).MatchString(err.Error()) {
				t.Errorf("Reopen(%d) of an outbox created with %d partitions: the error %q does not name %d (it must name both counts)", configured, s.parts, err, n)
			}
		}
	}
	// The refusals changed nothing: the stored count is the same.
	st := s.reopen(t, r, 0)
	if got := st.Partitions(); got != s.parts {
		t.Fatalf("Reopen(0) after refused reopens: Partitions() = %d, want the stored %d (a refused constructor must not change the stored count)", got, s.parts)
	}
	s.expectStillWorks(t, "after-refusals")
}

func reopenEntries[Tx any](t *testing.T, s *env[Tx]) {
	r := s.reopener(t)
	keys := keysByPartition(s.parts)
	var es []outbox.Entry
	for p, key := range keys {
		es = append(es, entry(fmt.Sprintf("p%d-1", p), key), entry(fmt.Sprintf("p%d-2", p), key))
	}
	s.appendCommit(t, es...)
	st := s.reopen(t, r, 0)
	if got := st.Partitions(); got != s.parts {
		t.Fatalf("Reopen(0) of an outbox created with %d partitions: Partitions() = %d, want the stored count", s.parts, got)
	}
	for p := range s.parts {
		owner := s.owner("reopened")
		l, err := st.AcquireLease(s.ctx, p, owner, longTTL)
		if err != nil {
			t.Fatalf("AcquireLease(partition %d) through the reopened store: %v", p, err)
		}
		batch, err := st.FindPendingBatch(s.ctx, l, 10)
		if err != nil {
			t.Fatalf("FindPendingBatch(%s) through the reopened store: %v", fmtLease(l), err)
		}
		want := []string{fmt.Sprintf("p%d-1", p), fmt.Sprintf("p%d-2", p)}
		expectIDs(t, fmt.Sprintf("FindPendingBatch(%s) through the reopened store (entries appended through the first store, keys of partition %d)", fmtLease(l), p), batch, want...)
		for _, e := range batch {
			if e.Partition != p {
				t.Fatalf("entry %s (key %q) fetched through the reopened store from partition %d reports Partition %d", e.ID, e.Key, p, e.Partition)
			}
		}
		if err := st.MarkSent(s.ctx, l, ids(batch)); err != nil {
			t.Fatalf("MarkSent(%s, %v) through the reopened store: %v", fmtLease(l), ids(batch), err)
		}
		if err := st.ReleaseLease(s.ctx, l); err != nil {
			t.Fatalf("ReleaseLease(%s) through the reopened store: %v", fmtLease(l), err)
		}
	}
	// Both stores are the same outbox: what the reopened store sent is gone
	// for the first one too.
	for p := range s.parts {
		if got := s.peek(t, p); len(got) > 0 {
			t.Fatalf("partition %d still holds %v through the first store after the reopened store sent them", p, ids(got))
		}
	}
	if err := st.Close(); err != nil {
		t.Fatalf("Close of the reopened store: %v", err)
	}
	s.expectStillWorks(t, "after-close")
}
