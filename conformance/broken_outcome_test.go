package conformance_test

import (
	"context"
	"fmt"
	"slices"
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
		w.mu.Lock()
		for _, id := range ids {
			delete(w.failingID, id)
		}
		w.mu.Unlock()
	}
	w.unclaimBy(ids...)
	if len(ids) == 0 && w.variant == "empty-inputs-check-lease" {
		if err := w.checkLease(ctx, lease); err != nil {
			return err
		}
	}
	if w.variant == "mark-sent-deferred" && len(ids) > 0 {
		if err := w.checkLease(ctx, lease); err != nil {
			return err
		}
		later := slices.Clone(ids)
		time.AfterFunc(100*time.Millisecond, func() {
			_ = w.Backend.MarkSent(context.Background(), w.current(lease), later)
		})
		return nil
	}
	if w.variant == "mark-sent-unknown-errors" {
		for _, id := range ids {
			if _, err := w.Backend.Lookup(ctx, id); err != nil {
				return fmt.Errorf("broken: MarkSent: %w", err)
			}
		}
	}
	if w.variant == "mark-sent-any-partition" {
		for _, id := range ids {
			if info, ok := w.otherPartition(ctx, id, lease.Partition); ok {
				if err := w.Backend.MarkSent(ctx, w.current(outbox.Lease{Partition: info.Partition}), []string{id}); err != nil {
					return err
				}
			}
		}
	}
	if w.variant == "hold-back-ignored" {
		w.mu.Lock()
		for _, id := range ids {
			delete(w.failing, id)
		}
		w.mu.Unlock()
	}
	w.unclaim(ids...)
	if w.variant == "sent-released-come-back" {
		w.mu.Lock()
		ids = slices.DeleteFunc(slices.Clone(ids), func(id string) bool { return w.released[id] })
		w.mu.Unlock()
	}
	if w.emptyOK(len(ids)) {
		return nil
	}
	err := w.Backend.MarkSent(w.ctx(ctx), w.real(lease), ids)
	if l, ok := w.revive(ctx, lease, err); ok {
		err = w.Backend.MarkSent(ctx, l, ids)
	}
	if err == nil && w.variant == "sent-ids-remembered" {
		w.mu.Lock()
		for _, id := range ids {
			w.sent[id] = true
		}
		w.mu.Unlock()
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
	switch w.variant {
	case "mark-failed-unfenced":
		lease = w.current(lease)
	case "mark-failed-any-partition":
		for _, f := range failures {
			if info, ok := w.otherPartition(ctx, f.ID, lease.Partition); ok {
				if err := w.Backend.MarkFailed(ctx, w.current(outbox.Lease{Partition: info.Partition}), []outbox.Failure{f}); err != nil {
					return err
				}
			}
		}
	case "hold-back-whole-key", "empty-key-held-back":
		w.mu.Lock()
		for _, f := range failures {
			if f.Park {
				delete(w.failingID, f.ID)
			} else if info, err := w.Backend.Lookup(ctx, f.ID); err == nil && (info.Key != "" || w.variant == "empty-key-held-back") {
				w.failingID[f.ID] = info.Key
			}
		}
		w.mu.Unlock()
	case "park-keeps-holding-back":
		w.mu.Lock()
		for _, f := range failures {
			if info, err := w.Backend.Lookup(ctx, f.ID); err == nil && f.Park && info.Key != "" {
				w.parkedKey[f.ID] = info.Key
			}
		}
		w.mu.Unlock()
	case "park-ignored":
		failures = slices.Clone(failures)
		for i := range failures {
			failures[i].Park, failures[i].Delay = false, 0
		}
	case "error-cut-short":
		failures = slices.Clone(failures)
		for i := range failures {
			failures[i].Error = outbox.TruncateUTF8(failures[i].Error, 100)
		}
	case "mark-failed-unknown-errors":
		for _, f := range failures {
			if info, err := w.Backend.Lookup(ctx, f.ID); err != nil || info.Parked {
				return fmt.Errorf("broken: MarkFailed: no pending entry %q: %w", f.ID, outbox.ErrNotFound)
			}
		}
	case "cancelled-claim-revived":
		for _, f := range failures {
			w.mu.Lock()
			e, ok := w.cancelled[f.ID]
			delete(w.cancelled, f.ID)
			w.mu.Unlock()
			if ok {
				tx := w.Backend.Begin()
				if err := w.Backend.AppendInTx(ctx, tx, e); err == nil {
					_ = tx.Commit()
				}
			}
		}
	case "mark-failed-zero-delay-late":
		failures = slices.Clone(failures)
		for i := range failures {
			if failures[i].Delay == 0 {
				failures[i].Delay = time.Second
			}
		}
	case "mark-failed-delay-late":
		failures = slices.Clone(failures)
		for i := range failures {
			if failures[i].Delay > 0 {
				failures[i].Delay += time.Second
			}
		}
	case "stats-due-ignores-retry-time":
		w.mu.Lock()
		for _, f := range failures {
			if !f.Park && f.Delay > 0 {
				w.retrying[f.ID] = true
			}
		}
		w.mu.Unlock()
	case "hold-back-first-failure-only":
		var pass []outbox.Failure
		for _, f := range failures {
			if !f.Park && w.failAgain(ctx, lease, f) {
				continue
			}
			pass = append(pass, f)
		}
		failures = pass
	case "mark-failed-ignores-delay":
		failures = slices.Clone(failures)
		for i := range failures {
			failures[i].Delay = 0
		}
	case "hold-back-ignored":
		var pass []outbox.Failure
		var release []string
		w.mu.Lock()
		for _, f := range failures {
			if key := w.keys[f.ID]; key != "" && !f.Park {
				w.failing[f.ID] = keptFailure{f: f, due: time.Now().Add(f.Delay)}
				w.attempts[f.ID]++
				release = append(release, f.ID)
				continue
			}
			pass = append(pass, f)
		}
		w.mu.Unlock()
		if len(release) > 0 {
			if err := w.Backend.Release(ctx, lease, release); err != nil {
				return err
			}
		}
		failures = pass
	}
	if w.emptyOK(len(failures)) {
		return nil
	}
	err := w.Backend.MarkFailed(ctx, lease, failures)
	if l, ok := w.revive(ctx, lease, err); ok {
		err = w.Backend.MarkFailed(ctx, l, failures)
	}
	return err
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
		for _, id := range ids {
			if _, err := w.Backend.Lookup(ctx, id); err != nil {
				return fmt.Errorf("broken: Release: %w", err)
			}
		}
	case "cancel-misses-returned":
		w.mu.Lock()
		for _, id := range ids {
			if _, ok := w.fetchedBy[id]; ok {
				w.returned[id] = true
			}
		}
		w.mu.Unlock()
	case "release-unparks":
		for _, id := range ids {
			if info, err := w.Backend.Lookup(ctx, id); err == nil && info.Parked {
				if _, err := w.Backend.Requeue(ctx, id); err != nil {
					return err
				}
			}
		}
	case "release-into-lease-partition":
		for _, id := range ids {
			if info, ok := w.otherPartition(ctx, id, lease.Partition); ok && !info.Parked {
				w.mu.Lock()
				w.strays[lease.Partition] = append(w.strays[lease.Partition], info.Entry)
				w.mu.Unlock()
			}
		}
	}
	if w.variant == "sent-released-come-back" {
		w.mu.Lock()
		for _, id := range ids {
			w.released[id] = true
		}
		w.mu.Unlock()
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
