package conformance

import (
	"testing"

	"github.com/outboxrelay/outbox"
)

// moveCases pin the optional interfaces of moving a live outbox
// ([outbox.Exporter], [outbox.Importer], [outbox.Holder],
// [outbox.Sealer]). Each is skipped, saying so, when the backend does not
// implement the interface it needs. Entries "exported from another
// outbox" are built by hand, as a source with another partition count
// would report them. The cases of each interface have a file of their
// own: cases_move_export.go, cases_move_import.go and
// cases_move_hold_seal.go; this one holds what they share.
func moveCases[Tx any]() []testCase[Tx] {
	return []testCase[Tx]{
		{group: "Exporter", name: "EveryStateInAppendOrder", run: exportEveryState[Tx]},
		{group: "Exporter", name: "FencedAndChangesNothing", run: exportFenced[Tx]},
		{group: "Exporter", name: "RemoveExportedEveryStateFencedIdempotent", partitions: 2, run: exportRemove[Tx]},
		{group: "Importer", name: "RoundTripEveryStateByKeyPartition", partitions: 4, run: importRoundTrip[Tx]},
		{group: "Importer", name: "IdempotentByIDAndCounts", run: importIdempotent[Tx]},
		{group: "Importer", name: "DueEntryFetchedBeforeEarlierAppend", run: importBeforeAppended[Tx]},
		{group: "Importer", name: "RetryingEntryHoldsBackAppended", run: importHoldsBack[Tx]},
		{group: "Importer", name: "DueEntryLoweredToHoldSince", run: importLowered[Tx]},
		{group: "Importer", name: "DueEntryAheadBySkewFetchedFirst", run: importSkewedDue[Tx]},
		{group: "Importer", name: "InvalidEntryRejectsWholeCall", run: importInvalid[Tx]},
		{group: "Importer", name: "ParkedEntryWithoutTopicStaysParked", run: importParkedNoTopic[Tx]},
		{group: "Holder", name: "HeldFetchesNothingUntilUnheld", partitions: 2, run: holdFetchesNothing[Tx]},
		{group: "Holder", name: "RepeatedHoldKeepsSince", run: holdKeepsSince[Tx]},
		{group: "Sealer", name: "SealedRefusesAppendsServesEntries", run: sealRefuses[Tx]},
		{group: "Sealer", name: "OpenTxCommitsBeforeSealReturnsOrFails", run: sealOpenTx[Tx]},
	}
}

func (s *env[Tx]) exporter(t *testing.T) outbox.Exporter {
	t.Helper()
	x, ok := s.b.(outbox.Exporter)
	if !ok {
		t.Skipf("the backend (%T) does not implement outbox.Exporter", s.b)
	}
	return x
}

func (s *env[Tx]) importer(t *testing.T) outbox.Importer {
	t.Helper()
	im, ok := s.b.(outbox.Importer)
	if !ok {
		t.Skipf("the backend (%T) does not implement outbox.Importer", s.b)
	}
	return im
}

func (s *env[Tx]) holder(t *testing.T) outbox.Holder {
	t.Helper()
	h, ok := s.b.(outbox.Holder)
	if !ok {
		t.Skipf("the backend (%T) does not implement outbox.Holder", s.b)
	}
	return h
}

func (s *env[Tx]) sealer(t *testing.T) outbox.Sealer {
	t.Helper()
	sl, ok := s.b.(outbox.Sealer)
	if !ok {
		t.Skipf("the backend (%T) does not implement outbox.Sealer", s.b)
	}
	return sl
}

// exportAll calls ExportBatch or fails the case, and checks that every
// entry it returns is of the lease's partition.
func (s *env[Tx]) exportAll(t *testing.T, x outbox.Exporter, l outbox.Lease, limit int) []outbox.EntryInfo {
	t.Helper()
	out, err := x.ExportBatch(s.ctx, l, limit)
	if err != nil {
		t.Fatalf("ExportBatch(%s, limit %d): %v", fmtLease(l), limit, err)
	}
	if len(out) > limit {
		t.Fatalf("ExportBatch(%s, limit %d) returned %d entries %v: more than the limit", fmtLease(l), limit, len(out), infoIDs(out))
	}
	for _, info := range out {
		if info.Partition != l.Partition {
			t.Fatalf("ExportBatch(%s) returned %s of another partition", fmtLease(l), fmtInfo(info))
		}
	}
	return out
}

// hold holds the outbox or fails the case, and returns its HoldState.
func (s *env[Tx]) hold(t *testing.T, h outbox.Holder, reason string) outbox.HoldState {
	t.Helper()
	if err := h.Hold(s.ctx, reason); err != nil {
		t.Fatalf("Hold(%q): %v", reason, err)
	}
	return s.holdState(t, h)
}

func (s *env[Tx]) holdState(t *testing.T, h outbox.Holder) outbox.HoldState {
	t.Helper()
	hs, err := h.HoldState(s.ctx)
	if err != nil {
		t.Fatalf("HoldState: %v", err)
	}
	return hs
}

func infoIDs(infos []outbox.EntryInfo) []string {
	out := make([]string, len(infos))
	for i, info := range infos {
		out[i] = info.ID
	}
	return out
}
