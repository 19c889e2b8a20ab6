package conformance_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/outboxrelay/outbox"
	"github.com/outboxrelay/outbox/backends/memory"
)

// appendVariants break AppendInTx.
var appendVariants = []variant{
	{"ignores-not-before", "AppendInTx clears NotBefore, so scheduled entries are due at once", []string{"Fetch/NotBeforeHonoured", "Fetch/OrderedByNotBefore", "Fetch/ScheduledEntryDoesNotHoldBackItsKey", "Fetch/ScheduledDueNotMuchAfterNotBefore", "Looker/ScheduledEntryDueAtNotBefore"}},
	{"rollback-leaks", "AppendInTx appends in a transaction of its own and commits it, ignoring the caller's rollback", []string{"Append/RollbackLeavesNothing", "Append/VisibleOnlyAfterCommit"}},
	{"loses-concurrent-append", "AppendInTx drops the entries when another append is in progress", []string{"Concurrency/ParallelAppendsAllVisibleInOrder", "Relay/ConcurrentAppendersAndRelays"}},
	{"append-not-idempotent", "AppendInTx gives a repeated ID a new ID, so it becomes a duplicate", []string{"Append/IdempotentAcrossTxs", "Append/IdempotentInOneTx", "Append/IdempotentWhileClaimed", "Append/IdempotentAfterParked", "Append/IdempotentWhileRetrying"}},
	{"repeated-id-last-wins", "AppendInTx keeps the last occurrence of an ID repeated in one call", []string{"Append/RepeatedIDInOneCallFirstWins"}},
	{"sent-ids-remembered", "AppendInTx drops entries whose ID was marked sent before", []string{"Append/SentIDAppendsAgain"}},
	{"not-before-late", "AppendInTx makes a scheduled entry due a second after its NotBefore", []string{"Fetch/ScheduledDueNotMuchAfterNotBefore"}},
	{"append-replaces-retrying", "AppendInTx of the ID of a pending entry that failed replaces it with the new append, unattempted, at the end of its key's order (as an upsert that only skips claimed and parked rows would)", []string{"Append/IdempotentWhileRetrying"}},
	{"no-entries-error", "AppendInTx with no entries returns an error", []string{"Append/NoEntriesIsNoop"}},
	{"invalid-entry-partial", "AppendInTx appends the valid entries of a call one by one and stops at the first invalid one, keeping those before it", []string{"Append/InvalidEntryRejectsWholeCall"}},
	{"headers-dropped", "AppendInTx drops the headers", []string{"Append/FieldsRoundTrip"}},
	{"payload-cut-at-64k", "AppendInTx keeps only the first 64 KiB of a payload", []string{"Append/LargeBinaryPayloadAndUnicode"}},
	{"input-retained", "AppendInTx keeps the caller's payload slice and headers map and returns them on fetches", []string{"Append/InputNotRetained"}},
	{"generated-ids-not-uuidv7", "AppendInTx fills an empty ID with a sequence number instead of a UUIDv7", []string{"Append/GeneratedIDsAreUniqueUUIDv7"}},
}

func (w *broken) AppendInTx(ctx context.Context, tx *memory.Tx, entries ...outbox.Entry) error {
	ctx = w.ctx(ctx)
	if w.emptyOK(len(entries)) {
		return nil
	}
	if err := w.sealedAppend(); err != nil && len(entries) > 0 {
		return err
	}
	entries = slices.Clone(entries)
	switch w.variant {
	case "repeated-id-last-wins":
		last := map[string]int{}
		for i, e := range entries {
			last[e.ID] = i
		}
		var keep []outbox.Entry
		for i, e := range entries {
			if e.ID == "" || last[e.ID] == i {
				keep = append(keep, e)
			}
		}
		entries = keep
	case "sent-ids-remembered":
		w.mu.Lock()
		entries = slices.DeleteFunc(entries, func(e outbox.Entry) bool { return w.sent[e.ID] })
		w.mu.Unlock()
	case "ignores-not-before":
		for i := range entries {
			entries[i].NotBefore = time.Time{}
		}
	case "not-before-late":
		for i := range entries {
			if !entries[i].NotBefore.IsZero() {
				entries[i].NotBefore = entries[i].NotBefore.Add(time.Second)
			}
		}
	case "rollback-leaks":
		own := w.Backend.Begin()
		if err := w.Backend.AppendInTx(ctx, own, entries...); err != nil {
			return err
		}
		return own.Commit()
	case "loses-concurrent-append":
		w.mu.Lock()
		busy := w.appending > 0
		w.appending++
		w.mu.Unlock()
		defer func() {
			w.mu.Lock()
			w.appending--
			w.mu.Unlock()
		}()
		if busy {
			return nil
		}
		time.Sleep(2 * time.Millisecond)
	case "no-entries-error":
		if len(entries) == 0 {
			return errors.New("broken: AppendInTx: no entries")
		}
	case "invalid-entry-partial":
		for _, e := range entries {
			if err := w.Backend.AppendInTx(ctx, tx, e); err != nil {
				return err
			}
		}
		return nil
	case "headers-dropped":
		for i := range entries {
			entries[i].Headers = nil
		}
	case "payload-cut-at-64k":
		for i := range entries {
			if len(entries[i].Payload) > 64<<10 {
				entries[i].Payload = entries[i].Payload[:64<<10]
			}
		}
	case "input-retained":
		w.mu.Lock()
		for i, e := range entries {
			if e.ID == "" {
				entries[i].ID = outbox.NewID()
			}
			if _, ok := w.inputs[entries[i].ID]; !ok {
				w.inputs[entries[i].ID] = entries[i]
			}
		}
		w.mu.Unlock()
	case "generated-ids-not-uuidv7":
		w.mu.Lock()
		for i := range entries {
			if entries[i].ID == "" {
				w.genSeq++
				entries[i].ID = fmt.Sprintf("entry-%06d", w.genSeq)
			}
		}
		w.mu.Unlock()
	case "append-replaces-retrying":
		for _, e := range entries {
			if info, err := w.Backend.Lookup(ctx, e.ID); err == nil && !info.Parked && info.Attempts > 0 {
				if err := w.Backend.MarkSent(ctx, w.current(outbox.Lease{Partition: info.Partition}), []string{e.ID}); err != nil {
					return err
				}
			}
		}
	case "append-not-idempotent":
		w.mu.Lock()
		for i := range entries {
			if entries[i].ID != "" && w.seen[entries[i].ID] {
				entries[i].ID = outbox.NewID()
			}
			w.seen[entries[i].ID] = true
		}
		w.mu.Unlock()
	case "notifies-on-append":
		w.mu.Lock()
		for ch := range w.subs {
			select {
			case ch <- outbox.AllPartitions:
			default:
			}
		}
		w.mu.Unlock()
	}
	return w.Backend.AppendInTx(ctx, tx, entries...)
}
