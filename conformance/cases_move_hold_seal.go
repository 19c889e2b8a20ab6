package conformance

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/outboxrelay/outbox"
)

// holdFetchesNothing: a held outbox hands nothing out while entries are
// due, appends and stats work, HoldState reports the reason and Since,
// and Unhold lets the entries out.
func holdFetchesNothing[Tx any](t *testing.T, s *env[Tx]) {
	h := s.holder(t)
	if hs := s.holdState(t, h); hs.Held {
		t.Fatalf("HoldState of a new outbox: %+v; want not held", hs)
	}
	keys := keysByPartition(2)
	s.appendCommit(t, entry("before", keys[0]))
	start := time.Now()
	hs := s.hold(t, h, "moving to the new cluster")
	end := time.Now()
	if !hs.Held || hs.Reason != "moving to the new cluster" {
		t.Errorf("HoldState after Hold: %+v; want Held with the reason given", hs)
	}
	expectBetween(t, "HoldState.Since", hs.Since, start, end)
	s.appendCommit(t, entry("after", keys[0]), entry("p1", keys[1]))
	for p := range 2 {
		l := s.acquire(t, p, s.owner("relay"), longTTL)
		if got := s.fetch(t, l, 10); len(got) != 0 {
			t.Errorf("FindPendingBatch of partition %d of a held outbox returned %v; want nothing", p, ids(got))
		}
		if bf, ok := s.b.(outbox.BatchFetcher); ok {
			if b, err := bf.FetchBatch(s.ctx, l, 10); err != nil || len(b.Entries) != 0 {
				t.Errorf("FetchBatch of partition %d of a held outbox: %v, %v; want nothing", p, ids(b.Entries), err)
			}
		}
		s.releaseLease(t, l)
	}
	if in, ok := s.b.(outbox.Inspector); ok {
		st, err := in.Stats(s.ctx)
		if err != nil {
			t.Fatalf("Stats of a held outbox: %v", err)
		}
		if st.Pending != 3 || st.Due != 3 {
			t.Errorf("Stats of a held outbox with 3 due entries: %+v; want Pending 3, Due 3", st)
		}
	}
	if err := h.Unhold(s.ctx); err != nil {
		t.Fatalf("Unhold: %v", err)
	}
	if hs := s.holdState(t, h); hs.Held || hs.Reason != "" || !hs.Since.IsZero() {
		t.Errorf("HoldState after Unhold: %+v; want not held, no reason, a zero Since", hs)
	}
	expectIDs(t, "fetch of partition 0 after Unhold", s.peek(t, 0), "before", "after")
	expectIDs(t, "fetch of partition 1 after Unhold", s.peek(t, 1), "p1")
}

// holdKeepsSince: holding a held outbox keeps its first Since and
// replaces the reason; unholding an outbox that is not held is a no-op.
func holdKeepsSince[Tx any](t *testing.T, s *env[Tx]) {
	h := s.holder(t)
	if err := h.Unhold(s.ctx); err != nil {
		t.Fatalf("Unhold of an outbox that is not held: %v; want nil", err)
	}
	first := s.hold(t, h, "first")
	s.sleep(t, 20*time.Millisecond) // so a reset Since would differ
	second := s.hold(t, h, "second")
	if !second.Held || second.Reason != "second" || !second.Since.Equal(first.Since) {
		t.Errorf("HoldState after Hold(first) then Hold(second): %+v; want held, reason \"second\", the first Since %s", second, fmtTime(first.Since))
	}
	s.appendCommit(t, entry("e1", "k"))
	l := s.acquire(t, 0, s.owner("relay"), longTTL)
	if got := s.fetch(t, l, 10); len(got) != 0 {
		t.Errorf("fetch after a second Hold returned %v; want nothing", ids(got))
	}
}

// appendErr appends e in a transaction and returns the error of
// AppendInTx or, when it succeeded, of the commit.
func (s *env[Tx]) appendErr(t *testing.T, e outbox.Entry) error {
	t.Helper()
	tx := s.begin(t)
	if err := s.b.AppendInTx(s.ctx, tx, e); err != nil {
		_ = s.h.Rollback(s.ctx, tx)
		return err
	}
	return s.h.Commit(s.ctx, tx)
}

// sealRefuses: a sealed outbox refuses appends with ErrSealed, and serves
// the entries it has (fetch, mark, export) as before; Unseal accepts
// appends again.
func sealRefuses[Tx any](t *testing.T, s *env[Tx]) {
	sl := s.sealer(t)
	s.appendCommit(t, entry("e1", "k"), entry("e2", "k"))
	if sealed, err := sl.Sealed(s.ctx); err != nil || sealed {
		t.Fatalf("Sealed of a new outbox: %v, %v; want false", sealed, err)
	}
	for range 2 {
		if err := sl.Seal(s.ctx); err != nil {
			t.Fatalf("Seal: %v", err)
		}
	}
	if sealed, err := sl.Sealed(s.ctx); err != nil || !sealed {
		t.Fatalf("Sealed after Seal: %v, %v; want true", sealed, err)
	}
	if err := s.appendErr(t, entry("refused", "k")); !errors.Is(err, outbox.ErrSealed) {
		t.Fatalf("append to a sealed outbox: %v; want an error wrapping ErrSealed (from AppendInTx or the commit)", err)
	}
	l := s.acquire(t, 0, s.owner("relay"), longTTL)
	expectIDs(t, "fetch of a sealed outbox", s.fetch(t, l, 1), "e1")
	s.markFailed(t, l, outbox.Failure{ID: "e1", Error: "once", Delay: -time.Hour})
	expectIDs(t, "fetch of a sealed outbox after a failure", s.fetch(t, l, 10), "e1")
	s.markSent(t, l, "e1")
	// Requeue works on a sealed outbox (Sealer's doc): e2 parked, then
	// requeued, is fetched again.
	if in, ok := s.b.(outbox.Inspector); ok {
		expectIDs(t, "fetch of e2 on a sealed outbox", s.fetch(t, l, 10), "e2")
		s.markFailed(t, l, outbox.Failure{ID: "e2", Error: "poison", Park: true})
		if n, err := in.Requeue(s.ctx, "e2"); err != nil || n != 1 {
			t.Fatalf("Requeue on a sealed outbox: %d, %v; want 1 requeued", n, err)
		}
	}
	if x, ok := s.b.(outbox.Exporter); ok {
		if got := infoIDs(s.exportAll(t, x, l, 10)); !slices.Equal(got, []string{"e2"}) {
			t.Errorf("ExportBatch of a sealed outbox returned %v; want e2 (the refused append left nothing)", got)
		}
	}
	for range 2 {
		if err := sl.Unseal(s.ctx); err != nil {
			t.Fatalf("Unseal: %v", err)
		}
	}
	if sealed, err := sl.Sealed(s.ctx); err != nil || sealed {
		t.Fatalf("Sealed after Unseal: %v, %v; want false", sealed, err)
	}
	s.appendCommit(t, entry("e3", "k"))
	expectIDs(t, "fetch after Unseal", s.fetch(t, l, 10), "e2", "e3")
}

// sealOpenTx: an append in a transaction open when Seal is called either
// commits before Seal returns (and is kept) or fails with ErrSealed (and
// leaves nothing). Seal may wait for the transaction, so the case commits
// while Seal runs, when Seal has not returned within a moment.
func sealOpenTx[Tx any](t *testing.T, s *env[Tx]) {
	sl := s.sealer(t)
	tx := s.begin(t)
	if err := s.b.AppendInTx(s.ctx, tx, entry("open", "k")); err != nil {
		t.Fatalf("AppendInTx before Seal: %v", err)
	}
	sealed := make(chan error, 1)
	go func() { sealed <- sl.Seal(s.ctx) }()
	var sealErr error
	sealReturned := false
	select {
	case sealErr = <-sealed:
		sealReturned = true
	case <-time.After(200 * time.Millisecond): // Seal waits for tx, or is slow
	}
	commitErr := s.h.Commit(s.ctx, tx)
	if !sealReturned {
		select {
		case sealErr = <-sealed:
		case <-s.ctx.Done():
			t.Fatalf("watchdog: Seal did not return after the open transaction committed")
		}
	}
	if sealErr != nil {
		t.Fatalf("Seal: %v", sealErr)
	}
	got := s.peek(t, 0)
	switch {
	case commitErr == nil && sealReturned:
		t.Errorf("the commit of a transaction open when Seal was called succeeded after Seal returned (fetch: %v); once Seal returns, no append commits", ids(got))
	case commitErr == nil:
		expectIDs(t, "fetch after the commit that succeeded before Seal returned", got, "open")
	case !errors.Is(commitErr, outbox.ErrSealed):
		t.Errorf("the commit of a transaction open when Seal was called: %v; want nil (before Seal returned) or an error wrapping ErrSealed", commitErr)
	default:
		expectIDs(t, "fetch after the commit failed with ErrSealed", got)
	}
}
