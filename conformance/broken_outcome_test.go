package conformance_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/outboxrelay/outbox"
)

// outcomeVariants break MarkSent, MarkFailed and Release, the calls that
// finish a lease's claims (claims-stay-with-ended-lease also in fetchRaw).
var outcomeVariants = []variant{
	{"release-counts-attempt", "Release records a failed attempt (MarkFailed, retry now) instead of returning entries unchanged", []string{"Claims/ReleaseReturnsEntriesUnchanged"}},
	{"mark-failed-ignores-delay", "MarkFailed makes every failed entry due at once, ignoring Delay", []string{"Relay/RetriesWaitByStoreClockWithRelayClockAhead", "Relay/RetriesWaitByStoreClockWithRelayClockBehind", "Outcome/MarkFailedReschedulesAfterDelay", "Fetch/OrderedByRetryTime", "HoldBack/FailingEntryHoldsBackOnlyItsKey", "Looker/FailedEntryHasAttemptsErrorAndRetryTime"}},
	{"mark-failed-delay-late", "MarkFailed makes a failed entry due a second after its Delay", []string{"Outcome/RetryDueNotMuchAfterDelay"}},
	{"mark-failed-zero-delay-late", "MarkFailed makes an entry failed with Delay 0 due a second later, not at once", []string{"Outcome/RetryDueNotMuchAfterDelay"}},
	{"release-unparks", "Release of a parked ID requeues it", []string{"Claims/ReleaseLeavesUnclaimedEntriesAlone"}},
	{"mark-sent-unknown-errors", "MarkSent of an ID that is unknown or already sent returns ErrNotFound", []string{"Outcome/MarkSentRemovesAndIsIdempotent"}},
	{"mark-failed-unknown-errors", "MarkFailed of an ID that is unknown, sent or cancelled returns ErrNotFound", []string{"Outcome/MarkFailedNeverRevivesSent", "Canceler/CancelledClaimNeverComesBack"}},
	{"release-unknown-errors", "Release of an ID that is unknown or not claimed returns ErrNotFound", []string{"Claims/ReleaseIgnoresUnknownAndUnclaimed"}},
	{"error-cut-short", "MarkFailed keeps only the first 100 bytes of Error", []string{"Outcome/MarkFailedKeepsLongErrors"}},
	{"park-ignored", "MarkFailed with Park set retries the entry at once instead of parking it", []string{"Outcome/MarkFailedParks", "HoldBack/EndsWhenFailingEntryParked"}},
	{"claims-stay-with-ended-lease", "the unfinished claims of a lease that ended (expired and taken over, or released) stay claimed instead of coming back", []string{"Claims/ComeBackInOrderAfterLeaseExpiry", "Claims/ComeBackInOrderAfterLeaseRelease", "Relay/CrashBetweenPublishAndMarkIsTakenOver"}},
	{"mark-sent-deferred", "MarkSent returns at once and deletes the entries 100ms later, with the partition's lease of that moment (as an asynchronous write would), so a new holder can be handed them again", []string{"Concurrency/CompetingClaimersNeverShareAnEntry"}},
	{"sent-released-come-back", "MarkSent returns nil but leaves pending the entries the lease released earlier (as one that looks an entry up by a stored member a claim changed would)", []string{"Outcome/SentNeverFetchedAgain"}},
}

func (w *broken) MarkSent(ctx context.Context, lease outbox.Lease, ids []string) error {
	if w.variant == "mark-sent-unfenced" {
		lease = w.current(lease)
	}
	lease = w.byOwner(lease, "fenced-calls-by-owner")
	w.finished(ids...)
	if w.variant == "hold-back-whole-key" || w.variant == "empty-key-held-back" {
		deleteIDs(&w.mu, w.failingID, ids)
	}
	w.unclaimBy(ids...)
	if len(ids) == 0 && w.variant == "empty-inputs-check-lease" {
		if err := w.checkLease(ctx, lease); err != nil {
			return err
		}
	}
	if w.variant == "mark-sent-deferred" && len(ids) > 0 {
		return w.markSentLater(ctx, lease, ids)
	}
	if w.variant == "mark-sent-unknown-errors" {
		if err := w.lookupAll(ctx, "MarkSent", ids); err != nil {
			return err
		}
	}
	if w.variant == "mark-sent-any-partition" {
		if err := w.sentInOtherPartitions(ctx, lease.Partition, ids); err != nil {
			return err
		}
	}
	if w.variant == "hold-back-ignored" {
		deleteIDs(&w.mu, w.failing, ids)
	}
	w.unclaim(ids...)
	if w.variant == "sent-released-come-back" {
		ids = w.withoutReleased(ids)
	}
	if w.emptyOK(len(ids)) {
		return nil
	}
	err := w.Backend.MarkSent(w.ctx(ctx), w.real(lease), ids)
	if l, ok := w.revive(ctx, lease, err); ok {
		err = w.Backend.MarkSent(ctx, l, ids)
	}
	if err == nil && w.variant == "sent-ids-remembered" {
		w.rememberSent(ids)
	}
	return err
}

func (w *broken) MarkFailed(ctx context.Context, lease outbox.Lease, failures []outbox.Failure) error {
	ctx = w.ctx(ctx)
	lease = w.real(lease)
	for _, f := range failures {
		w.unclaim(f.ID)
	}
	lease = w.byOwner(lease, "fenced-calls-by-owner")
	for _, f := range failures {
		w.finished(f.ID)
		w.unclaimBy(f.ID)
	}
	if len(failures) == 0 && w.variant == "empty-inputs-check-lease" {
		if err := w.checkLease(ctx, lease); err != nil {
			return err
		}
	}
	lease, failures, err := w.breakFailures(ctx, lease, failures)
	if err != nil {
		return err
	}
	if w.emptyOK(len(failures)) {
		return nil
	}
	err = w.Backend.MarkFailed(ctx, lease, failures)
	if l, ok := w.revive(ctx, lease, err); ok {
		err = w.Backend.MarkFailed(ctx, l, failures)
	}
	return err
}

// breakFailures is MarkFailed's part that differs by variant: it returns
// the lease and failures to pass on to the backend, or the error MarkFailed
// returns instead.
func (w *broken) breakFailures(ctx context.Context, lease outbox.Lease, failures []outbox.Failure) (outbox.Lease, []outbox.Failure, error) {
	var err error
	switch w.variant {
	case "mark-failed-unfenced":
		lease = w.current(lease)
	case "mark-failed-any-partition":
		err = w.failInOtherPartitions(ctx, lease.Partition, failures)
	case "hold-back-whole-key", "empty-key-held-back":
		w.recordFailingKeys(ctx, failures, w.variant == "empty-key-held-back")
	case "park-keeps-holding-back":
		w.recordParkedKeys(ctx, failures)
	case "park-ignored":
		failures = editFailures(failures, func(f *outbox.Failure) { f.Park, f.Delay = false, 0 })
	case "error-cut-short":
		failures = editFailures(failures, func(f *outbox.Failure) { f.Error = outbox.TruncateUTF8(f.Error, 100) })
	case "mark-failed-unknown-errors":
		err = w.expectPending(ctx, failures)
	case "cancelled-claim-revived":
		w.reviveCancelled(ctx, failures)
	case "mark-failed-zero-delay-late":
		failures = editFailures(failures, func(f *outbox.Failure) {
			if f.Delay == 0 {
				f.Delay = time.Second
			}
		})
	case "mark-failed-delay-late":
		failures = editFailures(failures, func(f *outbox.Failure) {
			if f.Delay > 0 {
				f.Delay += time.Second
			}
		})
	case "stats-due-ignores-retry-time":
		w.recordRetrying(failures)
	case "hold-back-first-failure-only":
		failures = w.failKeyedAgain(ctx, lease, failures)
	case "mark-failed-ignores-delay":
		failures = editFailures(failures, func(f *outbox.Failure) { f.Delay = 0 })
	case "hold-back-ignored":
		failures, err = w.keepKeyedFailures(ctx, lease, failures)
	default:
		lease, failures, err = w.breakOperatorFailures(ctx, lease, failures)
	}
	return lease, failures, err
}

// unclaimBy forgets the claims of the given IDs (claims-stay-with-ended-lease,
// stats-claimed-not-pending).
func (w *broken) unclaimBy(ids ...string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, id := range ids {
		delete(w.claimedBy, id)
	}
}

func (w *broken) Release(ctx context.Context, lease outbox.Lease, ids []string) error {
	ctx = w.ctx(ctx)
	lease = w.real(lease)
	lease = w.byOwner(lease, "fenced-calls-by-owner")
	w.unclaim(ids...)
	w.unclaimBy(ids...)
	if len(ids) == 0 && w.variant == "empty-inputs-check-lease" {
		if err := w.checkLease(ctx, lease); err != nil {
			return err
		}
	}
	switch w.variant {
	case "release-unfenced":
		lease = w.current(lease)
	case "release-unknown-errors":
		if err := w.lookupAll(ctx, "Release", ids); err != nil {
			return err
		}
	case "cancel-misses-returned":
		w.recordReturned(ids)
	case "release-unparks":
		if err := w.unpark(ctx, ids); err != nil {
			return err
		}
	case "release-into-lease-partition":
		w.queueStrays(ctx, lease.Partition, ids)
	}
	if w.variant == "sent-released-come-back" {
		w.recordReleased(ids)
	}
	if w.variant == "release-counts-attempt" && len(ids) > 0 {
		fs := make([]outbox.Failure, len(ids))
		for i, id := range ids {
			fs[i] = outbox.Failure{ID: id, Error: "released", Delay: 0}
		}
		return w.Backend.MarkFailed(ctx, lease, fs)
	}
	if w.emptyOK(len(ids)) {
		return nil
	}
	err := w.Backend.Release(ctx, lease, ids)
	if l, ok := w.revive(ctx, lease, err); ok {
		err = w.Backend.Release(ctx, l, ids)
	}
	return err
}

// leaveEndedClaims is the claims-stay-with-ended-lease variant's fetch: an
// entry still claimed by a lease other than lease (one that ended) is left
// out of the batch; the others are recorded as claimed by lease.
func (w *broken) leaveEndedClaims(lease outbox.Lease, batch []outbox.Entry) []outbox.Entry {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := batch[:0]
	for _, e := range batch {
		if c, ok := w.claimedBy[e.ID]; ok && c.Version != lease.Version {
			continue // still the ended lease's claim
		}
		w.claimedBy[e.ID] = lease
		out = append(out, e)
	}
	return out
}

// deleteIDs deletes the given IDs from m, a map of the wrapper's state,
// with mu (the wrapper's lock) held.
func deleteIDs[V any](mu *sync.Mutex, m map[string]V, ids []string) {
	mu.Lock()
	defer mu.Unlock()
	for _, id := range ids {
		delete(m, id)
	}
}

// editFailures returns a copy of failures with edit applied to each.
func editFailures(failures []outbox.Failure, edit func(*outbox.Failure)) []outbox.Failure {
	failures = slices.Clone(failures)
	for i := range failures {
		edit(&failures[i])
	}
	return failures
}

// markSentLater is the mark-sent-deferred variant's MarkSent: it checks
// the lease, returns, and marks the entries sent 100ms later with the
// partition's lease of that moment.
func (w *broken) markSentLater(ctx context.Context, lease outbox.Lease, ids []string) error {
	if err := w.checkLease(ctx, lease); err != nil {
		return err
	}
	later := slices.Clone(ids)
	time.AfterFunc(100*time.Millisecond, func() {
		_ = w.Backend.MarkSent(context.Background(), w.current(lease), later)
	})
	return nil
}

// lookupAll is the *-unknown-errors variants' check: it fails the call
// named op with the error of the first ID that Lookup does not find.
func (w *broken) lookupAll(ctx context.Context, op string, ids []string) error {
	for _, id := range ids {
		if _, err := w.Backend.Lookup(ctx, id); err != nil {
			return fmt.Errorf("broken: %s: %w", op, err)
		}
	}
	return nil
}

// expectPending is the mark-failed-unknown-errors variant's check: every
// failure's entry must be pending.
func (w *broken) expectPending(ctx context.Context, failures []outbox.Failure) error {
	for _, f := range failures {
		if info, err := w.Backend.Lookup(ctx, f.ID); err != nil || info.Parked {
			return fmt.Errorf("broken: MarkFailed: no pending entry %q: %w", f.ID, outbox.ErrNotFound)
		}
	}
	return nil
}

// unpark is the release-unparks variant's Release: the parked entries
// among ids are requeued.
func (w *broken) unpark(ctx context.Context, ids []string) error {
	for _, id := range ids {
		if info, err := w.Backend.Lookup(ctx, id); err == nil && info.Parked {
			if _, err := w.Backend.Requeue(ctx, id); err != nil {
				return err
			}
		}
	}
	return nil
}

// recordReleased is the sent-released-come-back variant's record of the
// IDs released.
func (w *broken) recordReleased(ids []string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, id := range ids {
		w.released[id] = true
	}
}

// withoutReleased is the sent-released-come-back variant's MarkSent: the
// IDs released before are left out (and so stay pending).
func (w *broken) withoutReleased(ids []string) []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.DeleteFunc(slices.Clone(ids), func(id string) bool { return w.released[id] })
}
