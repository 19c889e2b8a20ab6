package conformance

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/outboxrelay/outbox"
)

func argumentCases[Tx any]() []testCase[Tx] {
	return []testCase[Tx]{
		{group: "Arguments", name: "AcquireLeaseRejectsBadArguments", partitions: 2, run: argsAcquire[Tx]},
		{group: "Arguments", name: "FindPendingBatchRejectsNonPositiveLimit", run: argsFetchLimit[Tx]},
		{group: "Arguments", name: "RenewLeaseRejectsNonPositiveTTL", run: argsRenewTTL[Tx]},
		{group: "Arguments", name: "EmptyInputsAreNoops", run: argsEmptyInputs[Tx]},
	}
}

func lifecycleCases[Tx any]() []testCase[Tx] {
	return []testCase[Tx]{
		{group: "Lifecycle", name: "EveryMethodFailsAfterClose", run: lifecycleClosed[Tx]},
		{group: "Lifecycle", name: "CancelledContextChangesNothing", run: lifecycleCancelled[Tx]},
		{group: "Lifecycle", name: "EmptyInputsFailAfterClose", run: lifecycleClosedEmpty[Tx]},
	}
}

func concurrencyCases[Tx any]() []testCase[Tx] {
	return []testCase[Tx]{
		{group: "Concurrency", name: "ParallelAppendsAllVisibleInOrder", run: concurrentAppends[Tx]},
		{group: "Concurrency", name: "CompetingClaimersNeverShareAnEntry", partitions: 2, run: concurrentClaimers[Tx]},
	}
}

func argsAcquire[Tx any](t *testing.T, s *env[Tx]) {
	for _, c := range []struct {
		what      string
		partition int
		owner     string
		ttl       time.Duration
	}{
		{"an empty owner", 0, "", longTTL},
		{"a zero ttl", 0, "owner", 0},
		{"a negative ttl", 0, "owner", -time.Second},
		{"partition -1", -1, "owner", longTTL},
		{fmt.Sprintf("partition %d of %d", s.parts, s.parts), s.parts, "owner", longTTL},
	} {
		l, err := s.b.AcquireLease(s.ctx, c.partition, c.owner, c.ttl)
		if !errors.Is(err, outbox.ErrInvalidArgument) {
			t.Errorf("AcquireLease with %s: got %s, %v; want an error wrapping ErrInvalidArgument", c.what, fmtLease(l), err)
		}
	}
	// None of the refused calls took a partition.
	for p := range s.parts {
		s.acquire(t, p, "owner-after", longTTL)
	}
}

func argsFetchLimit[Tx any](t *testing.T, s *env[Tx]) {
	s.appendCommit(t, entry("e1", "k"))
	l := s.acquire(t, 0, s.owner("relay"), longTTL)
	for _, limit := range []int{0, -1} {
		got, err := s.b.FindPendingBatch(s.ctx, l, limit)
		if !errors.Is(err, outbox.ErrInvalidArgument) || len(got) > 0 {
			t.Errorf("FindPendingBatch with limit %d: got %v, %v; want no entries and an error wrapping ErrInvalidArgument", limit, ids(got), err)
		}
	}
	expectIDs(t, "fetch with limit 10 after refused fetches", s.fetch(t, l, 10), "e1")
}

func argsRenewTTL[Tx any](t *testing.T, s *env[Tx]) {
	l := s.acquire(t, 0, "owner-a", longTTL)
	for _, ttl := range []time.Duration{0, -time.Second} {
		r, err := s.b.RenewLease(s.ctx, l, ttl)
		if !errors.Is(err, outbox.ErrInvalidArgument) {
			t.Errorf("RenewLease(%s, ttl %v): got %s, %v; want an error wrapping ErrInvalidArgument (a non-positive TTL is an invalid argument)", fmtLease(l), ttl, fmtLease(r), err)
		}
	}
	_, err := s.b.AcquireLease(s.ctx, 0, "owner-b", longTTL)
	expectErr(t, "AcquireLease by another owner after refused renewals (they must not have shortened the lease)", err, outbox.ErrLeaseHeld)
	// The lease is still valid: fenced calls and a proper renewal work.
	s.appendCommit(t, entry("e1", ""))
	expectIDs(t, fmt.Sprintf("fetch with %s after refused renewals", fmtLease(l)), s.fetch(t, l, 10), "e1")
	s.markSent(t, l, "e1")
	r, err := s.b.RenewLease(s.ctx, l, longTTL)
	if err != nil || r.Version != l.Version {
		t.Fatalf("RenewLease(%s, %v) after refused renewals: got %s, %v; want the same lease renewed", fmtLease(l), longTTL, fmtLease(r), err)
	}
}

func argsEmptyInputs[Tx any](t *testing.T, s *env[Tx]) {
	s.appendCommit(t, entry("e1", "k"))
	l := s.acquire(t, 0, s.owner("relay"), longTTL)
	expectIDs(t, "first fetch", s.fetch(t, l, 10), "e1")
	nobody := outbox.Lease{Partition: 0, Owner: "nobody", Version: l.Version + 100}
	for _, c := range []struct {
		what string
		err  error
	}{
		{"MarkSent with nil ids and a lease nobody holds (empty ids do not check the lease)", s.b.MarkSent(s.ctx, nobody, nil)},
		{"MarkSent with empty ids", s.b.MarkSent(s.ctx, l, []string{})},
		{"MarkFailed with nil failures", s.b.MarkFailed(s.ctx, l, nil)},
		{"MarkFailed with empty failures", s.b.MarkFailed(s.ctx, l, []outbox.Failure{})},
		{"Release with nil ids", s.b.Release(s.ctx, l, nil)},
	} {
		if c.err != nil {
			t.Errorf("%s: got %v, want nil", c.what, c.err)
		}
	}
	if in, ok := s.b.(outbox.Inspector); ok {
		if n, err := in.Requeue(s.ctx); n != 0 || err != nil {
			t.Errorf("Requeue with no IDs: got %d, %v; want 0, nil", n, err)
		}
	}
	s.release(t, l, "e1")
	s.releaseLease(t, l)
	got := s.peek(t, 0)
	expectIDs(t, "pending entries after the empty calls", got, "e1")
	if got[0].Attempts != 0 {
		t.Fatalf("e1 has Attempts %d after empty calls, want 0", got[0].Attempts)
	}
}

func lifecycleClosed[Tx any](t *testing.T, s *env[Tx]) {
	s.appendCommit(t, entry("e1", "k"))
	l := s.acquire(t, 0, s.owner("relay"), longTTL)
	expectIDs(t, "first fetch", s.fetch(t, l, 10), "e1")
	var notes <-chan int
	if n, ok := s.b.(outbox.Notifier); ok {
		var err error
		if notes, err = n.Notifications(s.ctx); err != nil {
			t.Fatalf("Notifications: %v", err)
		}
	}
	tx := s.begin(t)
	defer func() { _ = s.h.Rollback(s.ctx, tx) }()

	if err := s.b.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := s.b.Close(); err != nil {
		t.Fatalf("second Close: got %v, want nil (Close is idempotent)", err)
	}
	check := func(method string, err error) {
		t.Helper()
		if !errors.Is(err, outbox.ErrClosed) {
			t.Errorf("%s after Close: got %v, want an error wrapping ErrClosed", method, err)
		}
	}
	check("AppendInTx", s.b.AppendInTx(s.ctx, tx, entry("e2", "k")))
	_, err := s.b.AcquireLease(s.ctx, 0, "owner-b", longTTL)
	check("AcquireLease", err)
	_, err = s.b.RenewLease(s.ctx, l, longTTL)
	check("RenewLease", err)
	_, err = s.b.FindPendingBatch(s.ctx, l, 10)
	check("FindPendingBatch", err)
	check("MarkSent", s.b.MarkSent(s.ctx, l, []string{"e1"}))
	check("MarkFailed", s.b.MarkFailed(s.ctx, l, []outbox.Failure{{ID: "e1", Error: "x", Delay: 0}}))
	check("Release", s.b.Release(s.ctx, l, []string{"e1"}))
	check("ReleaseLease", s.b.ReleaseLease(s.ctx, l))
	if n, ok := s.b.(outbox.Notifier); ok {
		_, err := n.Notifications(s.ctx)
		check("Notifications", err)
		select {
		case _, open := <-notes:
			for open {
				_, open = <-notes
			}
		case <-time.After(waitLimit):
			t.Errorf("a Notifications channel opened before Close was not closed %v after Close", waitLimit)
		}
	}
	if c, ok := s.b.(outbox.Canceler); ok {
		check("Cancel", c.Cancel(s.ctx, "e1"))
	}
	if in, ok := s.b.(outbox.Inspector); ok {
		_, err := in.Stats(s.ctx)
		check("Stats", err)
		_, err = in.Parked(s.ctx, "", 10)
		check("Parked", err)
		_, err = in.Requeue(s.ctx, "e1")
		check("Requeue", err)
	}
}

func lifecycleClosedEmpty[Tx any](t *testing.T, s *env[Tx]) {
	l := s.acquire(t, 0, s.owner("relay"), longTTL)
	tx := s.begin(t)
	defer func() { _ = s.h.Rollback(s.ctx, tx) }()
	if err := s.b.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	check := func(method string, err error) {
		t.Helper()
		if !errors.Is(err, outbox.ErrClosed) {
			t.Errorf("%s after Close: got %v, want an error wrapping ErrClosed (a closed backend refuses every call, even with nothing to do)", method, err)
		}
	}
	check("AppendInTx with no entries", s.b.AppendInTx(s.ctx, tx))
	check("AppendInTx with an empty slice", s.b.AppendInTx(s.ctx, tx, []outbox.Entry{}...))
	check("MarkSent with nil ids", s.b.MarkSent(s.ctx, l, nil))
	check("MarkSent with empty ids", s.b.MarkSent(s.ctx, l, []string{}))
	check("MarkFailed with nil failures", s.b.MarkFailed(s.ctx, l, nil))
	check("Release with nil ids", s.b.Release(s.ctx, l, nil))
	if in, ok := s.b.(outbox.Inspector); ok {
		_, err := in.Requeue(s.ctx)
		check("Requeue with no IDs", err)
	}
}

func lifecycleCancelled[Tx any](t *testing.T, s *env[Tx]) {
	s.appendCommit(t, entry("e1", "k"), entry("e2", ""))
	l := s.acquire(t, 0, "owner-a", longTTL)
	expectIDs(t, "first fetch", s.fetch(t, l, 10), "e1", "e2")
	cctx, cancel := context.WithCancel(s.ctx)
	cancel()
	check := func(method string, err error) {
		t.Helper()
		if !errors.Is(err, context.Canceled) {
			t.Errorf("%s with a cancelled context: got %v, want an error wrapping context.Canceled", method, err)
		}
	}
	_, err := s.b.AcquireLease(cctx, 0, "owner-b", longTTL)
	check("AcquireLease (partition held by another owner)", err)
	_, err = s.b.AcquireLease(cctx, 0, "owner-a", longTTL)
	check("AcquireLease (re-acquire by the holder)", err)
	_, err = s.b.RenewLease(cctx, l, longTTL)
	check("RenewLease", err)
	_, err = s.b.FindPendingBatch(cctx, l, 10)
	check("FindPendingBatch", err)
	check("MarkSent", s.b.MarkSent(cctx, l, []string{"e1"}))
	check("MarkFailed", s.b.MarkFailed(cctx, l, []outbox.Failure{{ID: "e1", Error: "cancelled", Park: true}}))
	check("Release", s.b.Release(cctx, l, []string{"e1", "e2"}))
	check("ReleaseLease", s.b.ReleaseLease(cctx, l))
	dctx, dcancel := context.WithDeadline(s.ctx, time.Now().Add(-time.Second))
	defer dcancel()
	if _, err := s.b.FindPendingBatch(dctx, l, 10); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("FindPendingBatch with an expired deadline: got %v, want an error wrapping context.DeadlineExceeded", err)
	}
	if c, ok := s.b.(outbox.Canceler); ok {
		check("Cancel", c.Cancel(cctx, "e2"))
	}
	if in, ok := s.b.(outbox.Inspector); ok {
		_, err := in.Stats(cctx)
		check("Stats", err)
		_, err = in.Parked(cctx, "", 10)
		check("Parked", err)
		_, err = in.Requeue(cctx, "e1")
		check("Requeue", err)
	}
	s.memberCancelled(t, cctx)
	want := []string{"e1", "e2"}
	tx := s.begin(t)
	switch err := s.b.AppendInTx(cctx, tx, entry("e3", "")); {
	case err == nil:
		// AppendInTx may only queue work in tx; then the entry is part of
		// the transaction like any other.
		want = append(want, "e3")
	case errors.Is(err, context.Canceled):
	default:
		t.Errorf("AppendInTx with a cancelled context: got %v, want nil or an error wrapping context.Canceled", err)
	}
	if err := s.h.Commit(s.ctx, tx); err != nil {
		t.Logf("Harness.Commit after AppendInTx with a cancelled context: %v", err)
		want = want[:2]
	}
	// The lease is intact and nothing changed.
	_, err = s.b.AcquireLease(s.ctx, 0, "owner-b", longTTL)
	expectErr(t, "AcquireLease by owner-b after calls with a cancelled context (the holder's lease must be intact)", err, outbox.ErrLeaseHeld)
	s.release(t, l, "e1", "e2")
	s.releaseLease(t, l)
	got := s.peek(t, 0)
	expectIDs(t, "pending entries after calls with a cancelled context (they must change nothing)", got, want...)
	for _, e := range got {
		if e.Attempts != 0 {
			t.Errorf("entry %s has Attempts %d after calls with a cancelled context, want 0", e.ID, e.Attempts)
		}
	}
}

func concurrentAppends[Tx any](t *testing.T, s *env[Tx]) {
	const writers, txs, perTx = 8, 15, 2
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for w := range writers {
		wg.Go(func() {
			for i := range txs {
				tx, err := s.h.Begin(s.ctx)
				if err != nil {
					errs <- fmt.Errorf("writer %d: Begin: %w", w, err)
					return
				}
				var in []outbox.Entry
				for j := range perTx {
					key := fmt.Sprintf("w%d", w)
					if j == 1 {
						key = ""
					}
					in = append(in, entry(fmt.Sprintf("w%d-%02d-%d", w, i, j), key))
				}
				if err := s.b.AppendInTx(s.ctx, tx, in...); err != nil {
					_ = s.h.Rollback(s.ctx, tx)
					errs <- fmt.Errorf("writer %d: AppendInTx: %w", w, err)
					return
				}
				if err := s.h.Commit(s.ctx, tx); err != nil {
					errs <- fmt.Errorf("writer %d: Commit: %w", w, err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	got := s.peek(t, 0)
	seen := map[string]bool{}
	last := map[string]string{}
	for _, e := range got {
		if seen[e.ID] {
			t.Fatalf("entry %s fetched twice in one batch", e.ID)
		}
		seen[e.ID] = true
		if e.Key != "" {
			if p, ok := last[e.Key]; ok && p > e.ID {
				t.Fatalf("key %s: %s came before %s, but writer appended and committed them in the opposite order", e.Key, p, e.ID)
			}
			last[e.Key] = e.ID
		}
	}
	var missing []string
	for w := range writers {
		for i := range txs {
			for j := range perTx {
				if id := fmt.Sprintf("w%d-%02d-%d", w, i, j); !seen[id] {
					missing = append(missing, id)
				}
			}
		}
	}
	if len(missing) > 0 || len(got) != writers*txs*perTx {
		t.Fatalf("%d writers committed %d entries concurrently; %d were fetched; missing %v", writers, writers*txs*perTx, len(got), missing)
	}
}

func concurrentClaimers[Tx any](t *testing.T, s *env[Tx]) {
	const total, workers = 160, 4
	ledger := &claimLedger{claimed: map[string]outbox.Lease{}}
	ctx, cancel := context.WithCancel(s.ctx)
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, workers+2)
	fail := func(err error) {
		select {
		case errs <- err:
		default:
		}
		cancel()
	}
	for a := range 2 {
		wg.Go(func() {
			for i := range total / 2 / 4 {
				if err := s.appendInTx(ctx, claimerTx(a, i)...); err != nil {
					fail(fmt.Errorf("appender %d: %w", a, err))
					return
				}
			}
		})
	}
	for w := range workers {
		owner := fmt.Sprintf("worker-%d", w)
		wg.Go(func() {
			for ctx.Err() == nil && !ledger.allSent(total) {
				for p := range s.parts {
					if err := s.claimTurn(ctx, ledger, p, owner); err != nil {
						fail(err)
						return
					}
				}
				time.Sleep(time.Millisecond)
			}
		})
	}
	watchdog := time.AfterFunc(waitLimit*2, cancel)
	wg.Wait()
	watchdog.Stop()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if ledger.sent != total {
		var missing []string
		for a := range 2 {
			for i := range total / 2 / 4 {
				for _, e := range claimerTx(a, i) {
					if ledger.claimed[e.ID] == (outbox.Lease{}) {
						missing = append(missing, e.ID)
					}
				}
			}
		}
		slices.Sort(missing)
		t.Fatalf("%d workers sent %d of %d committed entries within %v; never fetched: %v", workers, ledger.sent, total, 2*waitLimit, missing)
	}
}

// claimerTx is the i-th transaction of concurrentClaimers' appender a:
// four entries, of keys key-0 to key-3.
func claimerTx(a, i int) []outbox.Entry {
	var in []outbox.Entry
	for j := range 4 {
		in = append(in, entry(fmt.Sprintf("a%d-%02d-%d", a, i, j), fmt.Sprintf("key-%d", j)))
	}
	return in
}

// appendInTx appends entries in a transaction of their own and commits it
// (or rolls it back when AppendInTx fails), returning the first error.
func (s *env[Tx]) appendInTx(ctx context.Context, entries ...outbox.Entry) error {
	tx, err := s.h.Begin(ctx)
	if err != nil {
		return err
	}
	if err := s.b.AppendInTx(ctx, tx, entries...); err != nil {
		_ = s.h.Rollback(ctx, tx)
		return err
	}
	return s.h.Commit(ctx, tx)
}

// claimLedger is what concurrentClaimers' workers share: the lease that
// claimed each entry, and how many entries were marked sent.
type claimLedger struct {
	mu      sync.Mutex
	claimed map[string]outbox.Lease
	sent    int
}

// allSent reports whether total entries were marked sent.
func (c *claimLedger) allSent(total int) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.sent == total
}

// claim records the entries of batch as claimed by l, and fails on the
// first one another lease had claimed (and marked sent) before.
func (c *claimLedger) claim(l outbox.Lease, batch []outbox.Entry) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, e := range batch {
		if prev, ok := c.claimed[e.ID]; ok {
			return fmt.Errorf("entry %s was handed to %s after %s had claimed it and marked it sent", e.ID, fmtLease(l), fmtLease(prev))
		}
		c.claimed[e.ID] = l
	}
	return nil
}

// markedSent counts n more entries marked sent.
func (c *claimLedger) markedSent(n int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.sent += n
}

// claimTurn is one turn of a concurrentClaimers worker on partition p: it
// takes the partition (or leaves it, when another worker holds it),
// fetches up to 4 entries, records them in ledger, marks them sent and
// releases the lease.
func (s *env[Tx]) claimTurn(ctx context.Context, ledger *claimLedger, p int, owner string) error {
	l, err := s.b.AcquireLease(ctx, p, owner, longTTL)
	if errors.Is(err, outbox.ErrLeaseHeld) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("%s: AcquireLease(%d): %w", owner, p, err)
	}
	batch, err := s.b.FindPendingBatch(ctx, l, 4)
	if err != nil {
		return fmt.Errorf("%s: FindPendingBatch(%s): %w", owner, fmtLease(l), err)
	}
	if err := ledger.claim(l, batch); err != nil {
		return err
	}
	if len(batch) > 0 {
		if err := s.b.MarkSent(ctx, l, ids(batch)); err != nil {
			return fmt.Errorf("%s: MarkSent(%s): %w", owner, fmtLease(l), err)
		}
		ledger.markedSent(len(batch))
	}
	if err := s.b.ReleaseLease(ctx, l); err != nil {
		return fmt.Errorf("%s: ReleaseLease(%s): %w", owner, fmtLease(l), err)
	}
	return nil
}
