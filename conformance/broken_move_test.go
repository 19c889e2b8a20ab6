package conformance_test

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/outboxrelay/outbox"
)

// moveVariants break ExportBatch, RemoveExported, Import and the methods
// of the Holder and the Sealer.
var moveVariants = []variant{
	{"import-appended-after", "Import appends the unparked entries it is given one by one as AppendInTx would (normal append order, after the entries already appended; attempts dropped)", []string{"Importer/DueEntryFetchedBeforeEarlierAppend", "Importer/RetryingEntryHoldsBackAppended", "Importer/InvalidEntryRejectsWholeCall"}},
	{"import-not-idempotent", "Import gives an ID the outbox already holds a new ID, so importing again duplicates it", []string{"Importer/IdempotentByIDAndCounts"}},
	{"export-skips-parked", "ExportBatch leaves out parked entries (as one that reads only the pending entries would)", []string{"Exporter/EveryStateInAppendOrder", "Importer/RoundTripEveryStateByKeyPartition", "Importer/ParkedEntryWithoutTopicStaysParked"}},
	{"hold-ignored", "Hold and HoldState keep their state in the wrapper, which fetches ignore", []string{"Holder/HeldFetchesNothingUntilUnheld", "Holder/RepeatedHoldKeepsSince"}},
	{"hold-since-reset", "Hold of a held outbox sets Since again", []string{"Holder/RepeatedHoldKeepsSince"}},
	{"import-due-not-lowered", "Import keeps the DueAt of a due entry as given, not lowered to the time the outbox was held", []string{"Importer/DueEntryLoweredToHoldSince"}},
	{"seal-ignored", "Seal and Sealed keep their state in the wrapper, which appends ignore", []string{"Sealer/SealedRefusesAppendsServesEntries", "Sealer/OpenTxCommitsBeforeSealReturnsOrFails"}},
	{"seal-checked-at-append-only", "a sealed outbox refuses AppendInTx but commits a transaction whose entries were appended before Seal", []string{"Sealer/OpenTxCommitsBeforeSealReturnsOrFails"}},
	{"export-unfenced", "ExportBatch and RemoveExported with a stale lease use the partition's newest lease instead", []string{"Exporter/FencedAndChangesNothing"}},
}

// ExportBatch is the memory backend's, broken by the export-* variants.
func (w *broken) ExportBatch(ctx context.Context, lease outbox.Lease, limit int) ([]outbox.EntryInfo, error) {
	if w.variant == "export-unfenced" {
		lease = w.current(lease)
	}
	out, err := w.Backend.ExportBatch(ctx, lease, limit)
	if w.variant == "export-skips-parked" {
		out = slices.DeleteFunc(out, func(info outbox.EntryInfo) bool { return info.Parked })
	}
	return out, err
}

// RemoveExported is the memory backend's, unfenced by export-unfenced.
func (w *broken) RemoveExported(ctx context.Context, lease outbox.Lease, ids []string) error {
	if w.variant == "export-unfenced" {
		lease = w.current(lease)
	}
	return w.Backend.RemoveExported(ctx, lease, ids)
}

// Import is the memory backend's, broken by the import-* variants.
func (w *broken) Import(ctx context.Context, entries []outbox.EntryInfo) (int, error) {
	entries = slices.Clone(entries)
	switch w.variant {
	case "import-not-idempotent":
		for i := range entries {
			if _, err := w.Backend.Lookup(ctx, entries[i].ID); err == nil {
				entries[i].ID = outbox.NewID()
			}
		}
	case "import-due-not-lowered":
		// Import into an outbox that is not held (whose bound is now,
		// which lowers nothing already due), then hold it again.
		hs, err := w.Backend.HoldState(ctx)
		if err != nil || !hs.Held {
			break
		}
		if err := w.Backend.Unhold(ctx); err != nil {
			return 0, err
		}
		n, err := w.Backend.Import(ctx, entries)
		if herr := w.Backend.Hold(ctx, hs.Reason); herr != nil {
			return n, herr
		}
		return n, err
	case "import-appended-after":
		var keep []outbox.EntryInfo
		n := 0
		for _, info := range entries {
			if info.Parked {
				keep = append(keep, info)
				continue
			}
			if _, err := w.Backend.Lookup(ctx, info.ID); err == nil {
				continue
			}
			e := info.Entry
			if info.DueAt.After(time.Now()) {
				e.NotBefore = info.DueAt
			}
			if err := w.Backend.Append(ctx, e); err != nil {
				return n, err
			}
			n++
		}
		m, err := w.Backend.Import(ctx, keep)
		return n + m, err
	}
	return w.Backend.Import(ctx, entries)
}

// Hold, Unhold and HoldState are the memory backend's, or the wrapper's
// own state for hold-ignored; hold-since-reset sets Since again.
func (w *broken) Hold(ctx context.Context, reason string) error {
	switch w.variant {
	case "hold-ignored":
		if err := ctx.Err(); err != nil {
			return err
		}
		w.mu.Lock()
		defer w.mu.Unlock()
		if !w.hold.Held {
			w.hold = outbox.HoldState{Held: true, Since: time.Now()}
		}
		w.hold.Reason = reason
		return nil
	case "hold-since-reset":
		if err := w.Backend.Unhold(ctx); err != nil {
			return err
		}
	}
	return w.Backend.Hold(ctx, reason)
}

func (w *broken) Unhold(ctx context.Context) error {
	if w.variant == "hold-ignored" {
		w.mu.Lock()
		defer w.mu.Unlock()
		w.hold = outbox.HoldState{}
		return ctx.Err()
	}
	return w.Backend.Unhold(ctx)
}

func (w *broken) HoldState(ctx context.Context) (outbox.HoldState, error) {
	if w.variant == "hold-ignored" {
		w.mu.Lock()
		defer w.mu.Unlock()
		return w.hold, ctx.Err()
	}
	return w.Backend.HoldState(ctx)
}

// Seal, Unseal and Sealed are the memory backend's, or the wrapper's own
// state for seal-ignored. seal-checked-at-append-only seals the backend
// only while AppendInTx runs (see sealedAppend).
func (w *broken) Seal(ctx context.Context) error {
	switch w.variant {
	case "seal-ignored", "seal-checked-at-append-only":
		w.mu.Lock()
		defer w.mu.Unlock()
		w.sealed = true
		return ctx.Err()
	}
	return w.Backend.Seal(ctx)
}

func (w *broken) Unseal(ctx context.Context) error {
	switch w.variant {
	case "seal-ignored", "seal-checked-at-append-only":
		w.mu.Lock()
		defer w.mu.Unlock()
		w.sealed = false
		return ctx.Err()
	}
	return w.Backend.Unseal(ctx)
}

func (w *broken) Sealed(ctx context.Context) (bool, error) {
	switch w.variant {
	case "seal-ignored", "seal-checked-at-append-only":
		w.mu.Lock()
		defer w.mu.Unlock()
		return w.sealed, ctx.Err()
	}
	return w.Backend.Sealed(ctx)
}

// sealedAppend is seal-checked-at-append-only's AppendInTx: refused while
// the wrapper is sealed, and never checked at commit.
func (w *broken) sealedAppend() error {
	if w.variant != "seal-checked-at-append-only" {
		return nil
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.sealed {
		return fmt.Errorf("broken: AppendInTx: %w", outbox.ErrSealed)
	}
	return nil
}
