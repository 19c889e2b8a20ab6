package conformance_test

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/outboxrelay/outbox"
)

// The variants of the operator SPI (issue 28) share this state and these
// hooks, which the wrapper methods of the other broken_*_test.go files
// call where those variants break them: breakInfo (Lookup),
// breakOperatorFailures (MarkFailed), afterFetchOperate (every fetch),
// breakParked (Parked), breakPartitionStats (PartitionStats) and
// breakHeartbeat (Heartbeat). The variants are listed by area in
// broken_history_test.go, broken_lister_test.go, broken_pauser_test.go,
// broken_fleet_test.go and broken_collation_test.go.

// opState is what the operator variants keep in the wrapper.
type opState struct {
	mu          sync.Mutex
	attempts    map[string][]outbox.Attempt // history-uncapped: every attempt by ID
	deferredKey map[string]string           // deferred-never-released: deferred IDs and their keys
	topics      map[string]time.Time        // pause-*: the pauses the wrapper keeps instead of the backend
	partitions  map[int]time.Time           // pause-partition-ignored: paused partitions kept by the wrapper
	members     map[string]outbox.Member    // members-include-expired, member-host-not-cut: every heartbeat as given
}

func newOpState() *opState {
	return &opState{
		attempts: map[string][]outbox.Attempt{}, deferredKey: map[string]string{},
		topics: map[string]time.Time{}, partitions: map[int]time.Time{}, members: map[string]outbox.Member{},
	}
}

// breakInfo breaks an entry as Lookup (and, through it, the listings)
// reports it.
func (w *broken) breakInfo(info outbox.EntryInfo) outbox.EntryInfo {
	switch w.variant {
	case "history-last-only":
		if n := len(info.History); n > 1 {
			info.History = info.History[n-1:]
		}
	case "history-newest-first":
		slices.Reverse(info.History)
	case "history-owner-missing":
		for i := range info.History {
			info.History[i].Owner = ""
		}
	case "history-reset-with-attempts":
		if info.Attempts == 0 {
			info.History = nil
		}
	case "history-uncapped":
		w.op.mu.Lock()
		if all := w.op.attempts[info.ID]; len(all) > len(info.History) {
			info.History = slices.Clone(all)
		}
		w.op.mu.Unlock()
	}
	return info
}

// breakOperatorFailures is breakFailures for the operator variants.
func (w *broken) breakOperatorFailures(ctx context.Context, lease outbox.Lease, failures []outbox.Failure) (outbox.Lease, []outbox.Failure, error) {
	switch w.variant {
	case "history-uncapped":
		w.recordAttempts(ctx, lease, failures)
	case "deferred-counts-attempt":
		failures = editFailures(failures, func(f *outbox.Failure) { f.Deferred = false })
	case "deferred-park-accepted":
		failures = editFailures(failures, func(f *outbox.Failure) {
			if f.Park {
				f.Deferred = false
			}
		})
	case "deferred-park-checked-late":
		for i, f := range failures {
			if f.Park && f.Deferred {
				if err := w.Backend.MarkFailed(ctx, lease, failures[:i]); err != nil {
					return lease, nil, err
				}
				return lease, nil, fmt.Errorf("broken: failure %q sets Park and Deferred: %w", f.ID, outbox.ErrInvalidArgument)
			}
		}
	case "deferred-never-released":
		w.op.mu.Lock()
		for _, f := range failures {
			if info, err := w.Backend.Lookup(ctx, f.ID); f.Deferred && err == nil && info.Key != "" {
				w.op.deferredKey[f.ID] = info.Key
			}
		}
		w.op.mu.Unlock()
	case "deferred-holds-back-only-attempted":
		return lease, w.rescheduleUnattempted(ctx, failures), nil
	}
	return lease, failures, nil
}

// recordAttempts is the history-uncapped variant's record of every
// attempt of failures.
func (w *broken) recordAttempts(ctx context.Context, lease outbox.Lease, failures []outbox.Failure) {
	w.op.mu.Lock()
	defer w.op.mu.Unlock()
	for _, f := range failures {
		if info, err := w.Backend.Lookup(ctx, f.ID); err != nil || info.Parked || f.Deferred {
			continue
		}
		w.op.attempts[f.ID] = append(w.op.attempts[f.ID], outbox.Attempt{At: time.Now(), Error: f.Error, Owner: lease.Owner})
	}
}

// rescheduleUnattempted is the deferred-holds-back-only-attempted
// variant's MarkFailed: a deferred entry never attempted is cancelled and
// appended again, scheduled Delay from now, as a backend that defers by
// moving the entry's due time and holds back by Attempts alone would
// treat it; it returns the other failures.
func (w *broken) rescheduleUnattempted(ctx context.Context, failures []outbox.Failure) []outbox.Failure {
	var rest []outbox.Failure
	for _, f := range failures {
		info, err := w.Backend.Lookup(ctx, f.ID)
		if !f.Deferred || err != nil || info.Attempts > 0 || info.Parked {
			rest = append(rest, f)
			continue
		}
		e := info.Entry
		e.NotBefore = time.Now().Add(f.Delay)
		if w.Backend.Cancel(ctx, f.ID) == nil {
			_ = w.Backend.Append(ctx, e)
		}
	}
	return rest
}

// afterFetchOperate is afterFetch for the operator variants.
func (w *broken) afterFetchOperate(ctx context.Context, lease outbox.Lease, batch []outbox.Entry) ([]outbox.Entry, error) {
	switch w.variant {
	case "deferred-never-released":
		w.op.mu.Lock()
		keys := maps.Clone(w.op.deferredKey)
		w.op.mu.Unlock()
		return w.holdBackByKey(ctx, lease, batch, keys, false)
	case "pause-not-holding-key", "pause-counts-attempt":
		return w.pausedFetch(ctx, lease, batch)
	case "deferred-blocks-partition":
		if !w.deferredIn(ctx, lease.Partition) {
			return batch, nil
		}
		var held []string
		out := batch[:0]
		for _, e := range batch {
			if info, err := w.Backend.Lookup(ctx, e.ID); err == nil && info.Deferred {
				out = append(out, e)
			} else {
				held = append(held, e.ID)
			}
		}
		return out, w.releaseHeld(ctx, lease, held)
	}
	return batch, nil
}

// deferredIn reports whether a pending entry of partition is deferred.
func (w *broken) deferredIn(ctx context.Context, partition int) bool {
	for _, state := range []outbox.EntryState{outbox.StateDue, outbox.StateScheduled, outbox.StateRetrying} {
		infos, _ := w.Backend.Entries(ctx, state, outbox.ListFilter{}, "", 100000)
		for _, info := range infos {
			if info.Deferred && info.Partition == partition {
				return true
			}
		}
	}
	return false
}

// TestOperatorCasesPassOnTheWrapper runs the operator areas on the broken
// wrapper with the variant "none" (in TestBrokenChild subprocesses) and
// requires every case to run and pass: the wrapper's hooks break nothing
// by themselves, so each variant's failures are its own.
func TestOperatorCasesPassOnTheWrapper(t *testing.T) {
	for _, area := range []string{"History", "Deferred", "Lister", "Collation", "Pauser", "MemberLister"} {
		t.Run(area, func(t *testing.T) {
			requirePassOnVariantNone(t, area, "the broken wrapper with no variant")
		})
	}
}
