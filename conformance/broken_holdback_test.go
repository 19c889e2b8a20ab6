package conformance_test

import (
	"context"
	"time"

	"github.com/outboxrelay/outbox"
)

// holdBackVariants break hold-back: a failing keyed entry holds back the
// later entries of its key, and only those, until it is sent or parked.
// Their code is in the helpers below, which the fetches, MarkSent and
// MarkFailed call.
var holdBackVariants = []variant{
	{"hold-back-ignored", "a failed keyed entry is tracked by the wrapper and released, so it no longer holds back its key", []string{"HoldBack/FailingEntryHoldsBackOnlyItsKey", "HoldBack/EndsWhenFailingEntrySent", "HoldBack/KeepsHoldingBackThroughRepeatedFailures", "HoldBack/ManyHeldBackKeepOrder", "Relay/PerKeyOrderWithInjectedFailures", "Relay/PerKeyOrderWithRepeatedFailures"}},
	{"hold-back-first-failure-only", "a keyed entry failing a second time stops holding back its key: MarkFailed deletes it and appends it again, never attempted, due after Delay (as one that sets a failing flag on the first failure only and clears it at each claim would)", []string{"HoldBack/KeepsHoldingBackThroughRepeatedFailures", "Relay/PerKeyOrderWithRepeatedFailures"}},
	{"hold-back-whole-key", "a failing entry holds back every other entry of its key, those appended before it included", []string{"HoldBack/OnlyEarlierEntriesHoldBack"}},
	{"park-keeps-holding-back", "a parked keyed entry keeps holding back the later entries of its key", []string{"HoldBack/EndsWhenFailingEntryParked"}},
	{"empty-key-held-back", "a failing entry with an empty key holds back the other entries with an empty key", []string{"HoldBack/EmptyKeyNeverHeldBack"}},
}

// keptFailure is a failure the hold-back-ignored variant keeps to itself,
// with the due time it computed from Delay (by the backend's clock, as a
// backend must).
type keptFailure struct {
	f   outbox.Failure
	due time.Time
}

// failAgain is the hold-back-first-failure-only variant's MarkFailed of a
// keyed entry that failed before: it deletes the entry and appends it
// again, never attempted (so it holds nothing back), due Delay from now,
// keeping its Attempts and LastError to itself. It reports whether it
// took the failure.
func (w *broken) failAgain(ctx context.Context, lease outbox.Lease, f outbox.Failure) bool {
	info, err := w.Backend.Lookup(ctx, f.ID)
	if err != nil || info.Parked || info.Key == "" || info.Partition != lease.Partition {
		return false
	}
	w.mu.Lock()
	attempts := info.Attempts
	if o, ok := w.overlay[f.ID]; ok {
		attempts = o.Attempts
	}
	w.mu.Unlock()
	if attempts == 0 {
		return false
	}
	if err := w.Backend.MarkSent(ctx, lease, []string{f.ID}); err != nil {
		return false
	}
	again := outbox.Entry{ID: info.ID, Topic: info.Topic, Key: info.Key, Payload: info.Payload, Headers: info.Headers, NotBefore: time.Now().Add(f.Delay)}
	tx := w.Backend.Begin()
	if err := w.Backend.AppendInTx(ctx, tx, again); err != nil {
		_ = tx.Rollback()
		return false
	}
	if err := tx.Commit(); err != nil {
		return false
	}
	w.mu.Lock()
	w.overlay[f.ID] = outbox.Entry{Attempts: attempts + 1, LastError: f.Error}
	w.mu.Unlock()
	return true
}

// holdBackByKey is the fetch of the variants that hold back by key in the
// wrapper (park-keeps-holding-back with the parked IDs, hold-back-whole-key
// and empty-key-held-back with the failing IDs): an entry of batch whose
// key is that of another ID in failing is released and left out; entries
// with an empty key only when emptyKeys is set.
func (w *broken) holdBackByKey(ctx context.Context, lease outbox.Lease, batch []outbox.Entry, failing map[string]string, emptyKeys bool) ([]outbox.Entry, error) {
	w.mu.Lock()
	var held []string
	out := batch[:0]
	for _, e := range batch {
		blocked := false
		for id, key := range failing {
			blocked = blocked || ((e.Key != "" || emptyKeys) && key == e.Key && id != e.ID)
		}
		if blocked {
			held = append(held, e.ID)
			continue
		}
		out = append(out, e)
	}
	w.mu.Unlock()
	if err := w.releaseHeld(ctx, lease, held); err != nil {
		return nil, err
	}
	return out, nil
}

// overlayAttempts is the fetch of the hold-back-first-failure-only and
// requeue-keeps-attempts variants: an entry of batch with an overlay
// reports the overlay's Attempts and LastError.
func (w *broken) overlayAttempts(batch []outbox.Entry) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for i, e := range batch {
		if o, ok := w.overlay[e.ID]; ok {
			batch[i].Attempts, batch[i].LastError = o.Attempts, o.LastError
		}
	}
}

// holdBackKept is the hold-back-ignored variant's fetch: it records the
// key of every entry of batch, and an entry with a failure the wrapper
// kept is released and left out until the failure's retry is due, then
// reports the wrapper's attempts and error.
func (w *broken) holdBackKept(ctx context.Context, lease outbox.Lease, batch []outbox.Entry) ([]outbox.Entry, error) {
	w.mu.Lock()
	var notDue []string
	out := batch[:0]
	for _, e := range batch {
		w.keys[e.ID] = e.Key
		if f, ok := w.failing[e.ID]; ok {
			if time.Now().Before(f.due) {
				notDue = append(notDue, e.ID)
				continue
			}
			e.Attempts, e.LastError = w.attempts[e.ID], f.f.Error
		}
		out = append(out, e)
	}
	w.mu.Unlock()
	if err := w.releaseHeld(ctx, lease, notDue); err != nil {
		return nil, err
	}
	return out, nil
}

// recordFailingKeys is the MarkFailed of hold-back-whole-key and
// empty-key-held-back: a parked entry stops holding back its key; a
// failing one with a key (or any key, when emptyKeys is set) holds it
// back.
func (w *broken) recordFailingKeys(ctx context.Context, failures []outbox.Failure, emptyKeys bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, f := range failures {
		if f.Park {
			delete(w.failingID, f.ID)
		} else if info, err := w.Backend.Lookup(ctx, f.ID); err == nil && (info.Key != "" || emptyKeys) {
			w.failingID[f.ID] = info.Key
		}
	}
}

// recordParkedKeys is the park-keeps-holding-back variant's MarkFailed: a
// parked keyed entry keeps holding back its key.
func (w *broken) recordParkedKeys(ctx context.Context, failures []outbox.Failure) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, f := range failures {
		if info, err := w.Backend.Lookup(ctx, f.ID); err == nil && f.Park && info.Key != "" {
			w.parkedKey[f.ID] = info.Key
		}
	}
}

// failKeyedAgain is the hold-back-first-failure-only variant's MarkFailed:
// it returns the failures failAgain did not take.
func (w *broken) failKeyedAgain(ctx context.Context, lease outbox.Lease, failures []outbox.Failure) []outbox.Failure {
	var pass []outbox.Failure
	for _, f := range failures {
		if !f.Park && w.failAgain(ctx, lease, f) {
			continue
		}
		pass = append(pass, f)
	}
	return pass
}

// keepKeyedFailures is the hold-back-ignored variant's MarkFailed: the
// failures of keyed entries that are not parked are kept by the wrapper
// and their entries released; it returns the other failures.
func (w *broken) keepKeyedFailures(ctx context.Context, lease outbox.Lease, failures []outbox.Failure) ([]outbox.Failure, error) {
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
	if err := w.releaseHeld(ctx, lease, release); err != nil {
		return failures, err
	}
	return pass, nil
}

// releaseHeld releases the entries the wrapper holds back (none when ids
// is empty).
func (w *broken) releaseHeld(ctx context.Context, lease outbox.Lease, ids []string) error {
	if len(ids) == 0 {
		return nil
	}
	return w.Backend.Release(ctx, lease, ids)
}
