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
		entries = lastOccurrences(entries)
	case "sent-ids-remembered":
		entries = w.withoutSent(entries)
	case "ignores-not-before":
		editEntries(entries, func(e *outbox.Entry) { e.NotBefore = time.Time{} })
	case "not-before-late":
		editEntries(entries, notBeforeLate)
	case "rollback-leaks":
		return w.appendCommitted(ctx, entries)
	case "loses-concurrent-append":
		busy, done := w.enterAppend()
		defer done()
		if busy {
			return nil
		}
		time.Sleep(2 * time.Millisecond)
	case "no-entries-error":
		if len(entries) == 0 {
			return errors.New("broken: AppendInTx: no entries")
		}
	case "invalid-entry-partial":
		return w.appendOneByOne(ctx, tx, entries)
	case "headers-dropped":
		editEntries(entries, func(e *outbox.Entry) { e.Headers = nil })
	case "payload-cut-at-64k":
		editEntries(entries, cutPayloadAt64K)
	case "input-retained":
		w.retainInputs(entries)
	case "generated-ids-not-uuidv7":
		w.sequenceIDs(entries)
	case "append-replaces-retrying":
		if err := w.sendRetrying(ctx, entries); err != nil {
			return err
		}
	case "append-not-idempotent":
		w.renewSeenIDs(entries)
	case "notifies-on-append":
		w.notifySubscribers()
	}
	return w.Backend.AppendInTx(ctx, tx, entries...)
}

// handInputs is the input-retained variant's fetch: the entries of batch
// carry the caller's Payload slice and Headers map, as appended.
func (w *broken) handInputs(batch []outbox.Entry) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for i, e := range batch {
		if in, ok := w.inputs[e.ID]; ok {
			batch[i].Payload, batch[i].Headers = in.Payload, in.Headers
		}
	}
}

// rememberSent is the sent-ids-remembered variant's record of the IDs
// marked sent.
func (w *broken) rememberSent(ids []string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, id := range ids {
		w.sent[id] = true
	}
}

// editEntries applies edit to each of entries, in place.
func editEntries(entries []outbox.Entry, edit func(*outbox.Entry)) {
	for i := range entries {
		edit(&entries[i])
	}
}

// notBeforeLate is the not-before-late variant's edit: a scheduled entry
// is due a second after its NotBefore.
func notBeforeLate(e *outbox.Entry) {
	if !e.NotBefore.IsZero() {
		e.NotBefore = e.NotBefore.Add(time.Second)
	}
}

// cutPayloadAt64K is the payload-cut-at-64k variant's edit: a payload
// keeps its first 64 KiB.
func cutPayloadAt64K(e *outbox.Entry) {
	if len(e.Payload) > 64<<10 {
		e.Payload = e.Payload[:64<<10]
	}
}

// appendCommitted is the rollback-leaks variant's AppendInTx: the entries
// are appended in a transaction of the wrapper's own, committed at once.
func (w *broken) appendCommitted(ctx context.Context, entries []outbox.Entry) error {
	own := w.Backend.Begin()
	if err := w.Backend.AppendInTx(ctx, own, entries...); err != nil {
		return err
	}
	return own.Commit()
}

// lastOccurrences is the repeated-id-last-wins variant's AppendInTx: of an
// ID repeated in entries, only the last occurrence is kept.
func lastOccurrences(entries []outbox.Entry) []outbox.Entry {
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
	return keep
}

// withoutSent is the sent-ids-remembered variant's AppendInTx: entries
// whose ID was marked sent before are dropped.
func (w *broken) withoutSent(entries []outbox.Entry) []outbox.Entry {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.DeleteFunc(entries, func(e outbox.Entry) bool { return w.sent[e.ID] })
}

// enterAppend is the loses-concurrent-append variant's count of the
// AppendInTx calls in progress: it reports whether another one is, and
// returns the func that ends this one.
func (w *broken) enterAppend() (busy bool, done func()) {
	w.mu.Lock()
	defer w.mu.Unlock()
	busy = w.appending > 0
	w.appending++
	return busy, func() {
		w.mu.Lock()
		w.appending--
		w.mu.Unlock()
	}
}

// appendOneByOne is the invalid-entry-partial variant's AppendInTx: each
// entry is appended on its own, until the first that fails.
func (w *broken) appendOneByOne(ctx context.Context, tx *memory.Tx, entries []outbox.Entry) error {
	for _, e := range entries {
		if err := w.Backend.AppendInTx(ctx, tx, e); err != nil {
			return err
		}
	}
	return nil
}

// retainInputs is the input-retained variant's record of the caller's
// entries (their Payload slices and Headers maps), by ID (filled in where
// empty).
func (w *broken) retainInputs(entries []outbox.Entry) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for i, e := range entries {
		if e.ID == "" {
			entries[i].ID = outbox.NewID()
		}
		if _, ok := w.inputs[entries[i].ID]; !ok {
			w.inputs[entries[i].ID] = entries[i]
		}
	}
}

// sequenceIDs is the generated-ids-not-uuidv7 variant's AppendInTx: an
// empty ID is filled with the next sequence number.
func (w *broken) sequenceIDs(entries []outbox.Entry) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for i := range entries {
		if entries[i].ID == "" {
			w.genSeq++
			entries[i].ID = fmt.Sprintf("entry-%06d", w.genSeq)
		}
	}
}

// sendRetrying is the append-replaces-retrying variant's AppendInTx: a
// pending entry with the ID of one of entries that failed before is
// deleted (marked sent), so the append adds it again, never attempted.
func (w *broken) sendRetrying(ctx context.Context, entries []outbox.Entry) error {
	for _, e := range entries {
		if info, err := w.Backend.Lookup(ctx, e.ID); err == nil && !info.Parked && info.Attempts > 0 {
			if err := w.Backend.MarkSent(ctx, w.current(outbox.Lease{Partition: info.Partition}), []string{e.ID}); err != nil {
				return err
			}
		}
	}
	return nil
}

// renewSeenIDs is the append-not-idempotent variant's AppendInTx: an ID
// appended before is replaced by a new one.
func (w *broken) renewSeenIDs(entries []outbox.Entry) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for i := range entries {
		if entries[i].ID != "" && w.seen[entries[i].ID] {
			entries[i].ID = outbox.NewID()
		}
		w.seen[entries[i].ID] = true
	}
}
