package conformance_test

import (
	"context"
	"errors"
	"time"

	"github.com/outboxrelay/outbox"
)

// cancelerVariants break Cancel.
var cancelerVariants = []variant{
	{"cancel-unknown-succeeds", "Cancel of an ID that does not exist returns nil", []string{"Canceler/CancelsPendingAndScheduled", "Canceler/SentIsNotFound", "Canceler/CancelsParked"}},
	{"cancel-misses-returned", "Cancel returns nil but leaves pending an entry that was claimed and came back (released by the relay, or by its lease's release or expiry), as one that looks only where never-claimed and currently claimed entries live would", []string{"Canceler/CancelAfterReleaseOrLeaseEnd"}},
	{"cancel-parked-left", "Cancel of a parked entry returns nil but leaves it parked", []string{"Canceler/CancelsParked"}},
	{"cancelled-claim-revived", "MarkFailed of a claimed entry that was cancelled appends it again (as an upsert of the failure would)", []string{"Canceler/CancelledClaimNeverComesBack"}},
}

// finished is the cancel-misses-returned variant's record that the relay
// finished the entries with the given IDs.
func (w *broken) finished(ids ...string) {
	if w.variant != "cancel-misses-returned" {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, id := range ids {
		delete(w.fetchedBy, id)
		delete(w.returned, id)
	}
}

// cameBack reports whether the entry id was claimed and came back without
// being finished: released by the relay, or its lease released or expired
// or taken over (the cancel-misses-returned variant then cannot find it).
func (w *broken) cameBack(id string) bool {
	w.mu.Lock()
	l, fetched := w.fetchedBy[id]
	returned := w.returned[id]
	freed := w.freed[outbox.Lease{Partition: l.Partition, Owner: l.Owner, Version: l.Version}]
	w.mu.Unlock()
	if !fetched {
		return false
	}
	return returned || freed || !time.Now().Before(l.Expires) || w.current(l).Version != l.Version
}

func (w *broken) Cancel(ctx context.Context, id string) error {
	if w.variant == "cancel-misses-returned" && w.cameBack(id) {
		return nil
	}
	before, lerr := w.Backend.Lookup(ctx, id)
	if w.variant == "cancel-parked-left" && lerr == nil && before.Parked {
		return nil
	}
	err := w.Backend.Cancel(w.ctx(ctx), id)
	if err == nil && lerr == nil && w.variant == "cancelled-claim-revived" {
		w.mu.Lock()
		w.cancelled[id] = outbox.Entry{ID: before.ID, Topic: before.Topic, Key: before.Key, Payload: before.Payload, Headers: before.Headers}
		w.mu.Unlock()
	}
	if err == nil && lerr == nil {
		w.mu.Lock()
		switch {
		case w.variant == "stats-cancel-parked-uncounted" && before.Parked:
			w.ghosts.Parked++
		case w.variant == "stats-cancel-pending-uncounted" && !before.Parked:
			w.ghosts.Pending++
			if !before.DueAt.After(time.Now()) {
				w.ghosts.Due++
			}
		}
		w.mu.Unlock()
	}
	if w.variant == "cancel-unknown-succeeds" && errors.Is(err, outbox.ErrNotFound) {
		return nil
	}
	return err
}

// recordFetchedBy is the cancel-misses-returned variant's record of the
// entries of batch, fetched by lease (and not returned since).
func (w *broken) recordFetchedBy(lease outbox.Lease, batch []outbox.Entry) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, e := range batch {
		w.fetchedBy[e.ID] = lease
		delete(w.returned, e.ID)
	}
}

// reviveCancelled is the cancelled-claim-revived variant's MarkFailed: a
// failing entry that was cancelled while claimed is appended again.
func (w *broken) reviveCancelled(ctx context.Context, failures []outbox.Failure) {
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
}

// recordReturned is the cancel-misses-returned variant's record of the
// fetched IDs the relay released.
func (w *broken) recordReturned(ids []string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, id := range ids {
		if _, ok := w.fetchedBy[id]; ok {
			w.returned[id] = true
		}
	}
}
