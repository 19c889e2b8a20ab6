package conformance_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/outboxrelay/outbox"
)

// lookerVariants break Lookup.
var lookerVariants = []variant{
	{"lookup-parked-as-pending", "Lookup reports a parked entry as pending (Parked false, DueAt its CreatedAt)", []string{"Looker/ParkedEntryIsParkedWithoutDueTime"}},
	{"lookup-finds-sent", "Lookup returns an entry that was fetched and then marked sent, as pending", []string{"Looker/SentCancelledOrUnknownIsNotFound"}},
	{"lookup-shares-payload", "Lookup returns the same Payload slice and Headers map for every Lookup of an ID", []string{"Looker/ResultIsTheCallers"}},
	{"lookup-due-at-after-failure-only", "Lookup reports a zero DueAt until the entry has failed (as a nullable retry-time column would)", []string{"Looker/PendingEntryReturnedWhole", "Looker/ScheduledEntryDueAtNotBefore", "Looker/ClaimedAndHeldBackEntriesAreFound"}},
	{"lookup-truncates-error", "Lookup cuts LastError to 200 bytes (a preview, not the error as stored)", []string{"Looker/FailedEntryHasAttemptsErrorAndRetryTime"}},
	{"lookup-misses-claimed", "Lookup reports ErrNotFound for an entry claimed by a lease (looking only where unclaimed entries are)", []string{"Looker/ClaimedAndHeldBackEntriesAreFound"}},
}

// unclaim is the lookup-misses-claimed variant's record that the relay
// finished the entries with the given IDs.
func (w *broken) unclaim(ids ...string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, id := range ids {
		delete(w.claimed, id)
	}
}

func (w *broken) Lookup(ctx context.Context, id string) (outbox.EntryInfo, error) {
	info, err := w.Backend.Lookup(w.ctx(ctx), id)
	w.mu.Lock()
	defer w.mu.Unlock()
	switch w.variant {
	case "lookup-finds-sent":
		if e, ok := w.fetched[id]; ok && errors.Is(err, outbox.ErrNotFound) {
			return outbox.EntryInfo{Entry: e.Clone(), DueAt: e.CreatedAt}, nil
		}
	case "lookup-misses-claimed":
		if err == nil && w.claimed[id] {
			return outbox.EntryInfo{}, fmt.Errorf("broken: no entry has ID %q: %w", id, outbox.ErrNotFound)
		}
	}
	if err != nil {
		return info, err
	}
	switch w.variant {
	case "lookup-parked-as-pending":
		if info.Parked {
			info.Parked, info.DueAt = false, info.CreatedAt
		}
	case "lookup-shares-payload":
		if first, ok := w.lent[id]; ok {
			info.Payload, info.Headers = first.Payload, first.Headers
		} else {
			w.lent[id] = info
		}
	case "lookup-due-at-after-failure-only":
		if info.Attempts == 0 {
			info.DueAt = time.Time{}
		}
	case "lookup-truncates-error":
		info.LastError = outbox.TruncateUTF8(info.LastError, 200)
	default:
		info = w.breakInfo(info)
	}
	return info, nil
}

// recordFetched is the record of the lookup-finds-sent and
// lookup-misses-claimed variants: the entries of batch were fetched and
// are claimed.
func (w *broken) recordFetched(batch []outbox.Entry) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, e := range batch {
		w.fetched[e.ID] = e.Clone()
		w.claimed[e.ID] = true
	}
}
