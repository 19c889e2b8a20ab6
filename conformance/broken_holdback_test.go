package conformance_test

import (
	"context"
	"time"

	"github.com/outboxrelay/outbox"
)

// holdBackVariants break hold-back: a failing keyed entry holds back the
// later entries of its key, and only those, until it is sent or parked.
// Their code is in fetchRaw, MarkSent and MarkFailed, with the helpers
// below.
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
