package conformance

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/outboxrelay/outbox"
)

// moveCases pin the optional interfaces of moving a live outbox
// ([outbox.Exporter], [outbox.Importer], [outbox.Holder],
// [outbox.Sealer]). Each is skipped, saying so, when the backend does not
// implement the interface it needs. Entries "exported from another
// outbox" are built by hand, as a source with another partition count
// would report them.
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

// imports calls Import or fails the case, and checks the count.
func (s *env[Tx]) imports(t *testing.T, im outbox.Importer, want int, entries ...outbox.EntryInfo) {
	t.Helper()
	n, err := im.Import(s.ctx, entries)
	if err != nil {
		t.Fatalf("Import(%v): %v", infoIDs(entries), err)
	}
	if n != want {
		t.Fatalf("Import(%v) returned %d; want %d (the entries it added)", infoIDs(entries), n, want)
	}
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

// exported returns an entry as another outbox would export it: created
// two hours ago by the suite's clock, due at due, of partition 5 of 7
// (Import must ignore it).
func exported(id, key string, due time.Time) outbox.EntryInfo {
	e := entry(id, key)
	e.Partition = 5
	e.CreatedAt = time.Now().Add(-2 * time.Hour).Truncate(time.Millisecond)
	return outbox.EntryInfo{Entry: e, DueAt: due}
}

// sameInfo compares what Import must keep of an entry with what a store
// reports of it: the caller-set fields, NotBefore, CreatedAt, Attempts,
// LastError, Parked and DueAt (times within clockSkew: stores keep them
// to the millisecond or better).
func sameInfo(want, got outbox.EntryInfo) string {
	var diffs []string
	if d := sameEntry(want.Entry, got.Entry); d != "" {
		diffs = append(diffs, d)
	}
	if got.Attempts != want.Attempts || got.LastError != want.LastError || got.Parked != want.Parked {
		diffs = append(diffs, fmt.Sprintf("Attempts %d, LastError %q, Parked %v; want %d, %q, %v", got.Attempts, got.LastError, got.Parked, want.Attempts, want.LastError, want.Parked))
	}
	for _, c := range []struct {
		name      string
		got, want time.Time
	}{{"NotBefore", got.NotBefore, want.NotBefore}, {"CreatedAt", got.CreatedAt, want.CreatedAt}, {"DueAt", got.DueAt, want.DueAt}} {
		if c.got.IsZero() != c.want.IsZero() || c.got.Sub(c.want).Abs() > clockSkew {
			diffs = append(diffs, fmt.Sprintf("%s %s, want %s", c.name, fmtTime(c.got), fmtTime(c.want)))
		}
	}
	return strings.Join(diffs, "; ")
}

// exportEveryState: an export returns every unsent entry of the
// partition, due, scheduled, retrying, parked and claimed by a lease that
// expired, in append order with its state, and claims nothing.
func exportEveryState[Tx any](t *testing.T, s *env[Tx]) {
	x := s.exporter(t)
	sched := entry("sched", "s")
	sched.NotBefore = time.Now().Add(time.Hour).Truncate(time.Millisecond)
	bin := entry("d1", "d")
	bin.Payload = append([]byte{0, 0xff, 0}, "ünïcode"...)
	bin.Headers["second"] = "ünïcode header"
	start := time.Now()
	s.appendCommit(t, entry("a1", "a"), sched, entry("b1", "b"), entry("c1", "c"), bin, entry("u1", ""))
	end := time.Now()
	old := s.acquire(t, 0, s.owner("relay"), shortTTL)
	expectIDs(t, "first fetch", s.fetch(t, old, 10), "a1", "b1", "c1", "d1", "u1")
	failStart := time.Now()
	s.markFailed(t, old,
		outbox.Failure{ID: "a1", Error: "retry later", Delay: time.Hour},
		outbox.Failure{ID: "b1", Error: "poison", Park: true})
	failEnd := time.Now()
	// c1, d1 and u1 stay claimed by old, which expires.
	mover := s.acquireAfterExpiry(t, 0, s.owner("mover"), longTTL)

	got := s.exportAll(t, x, mover, 100)
	want := []string{"a1", "sched", "b1", "c1", "d1", "u1"}
	if !slices.Equal(infoIDs(got), want) {
		t.Fatalf("ExportBatch of a partition with a retrying (a1), scheduled (sched), parked (b1) and claimed-under-an-expired-lease (c1, d1, u1) entry returned %v; want every one, in append order: %v", infoIDs(got), want)
	}
	for _, info := range got {
		var e outbox.Entry
		switch info.ID {
		case "sched":
			e = sched
		case "d1":
			e = bin
		default:
			e = entry(info.ID, info.Key)
		}
		if d := sameEntry(e, info.Entry); d != "" {
			t.Errorf("ExportBatch returned %s: %s", info.ID, d)
		}
		expectBetween(t, "CreatedAt of exported "+info.ID, info.CreatedAt, start, end)
		switch info.ID {
		case "a1":
			if info.Attempts != 1 || info.LastError != "retry later" || info.Parked {
				t.Errorf("exported a1 (failed once, retrying in an hour) is %s: want Attempts 1, LastError \"retry later\", not parked", fmtInfo(info))
			}
			expectBetween(t, "DueAt of exported a1 (MarkFailed with Delay 1h)", info.DueAt, failStart.Add(time.Hour), failEnd.Add(time.Hour))
		case "b1":
			if info.Attempts != 1 || info.LastError != "poison" || !info.Parked || !info.DueAt.IsZero() {
				t.Errorf("exported b1 (parked) is %s: want Attempts 1, LastError \"poison\", Parked, a zero DueAt", fmtInfo(info))
			}
		case "sched":
			if info.Attempts != 0 || info.Parked {
				t.Errorf("exported sched is %s: want Attempts 0, not parked", fmtInfo(info))
			}
			expectBetween(t, "NotBefore of exported sched", info.NotBefore, sched.NotBefore, sched.NotBefore)
			expectBetween(t, "DueAt of exported sched", info.DueAt, sched.NotBefore, sched.NotBefore)
		default:
			if info.Attempts != 0 || info.Parked || info.LastError != "" {
				t.Errorf("exported %s (claimed under an expired lease) is %s: want Attempts 0, not parked", info.ID, fmtInfo(info))
			}
			expectBetween(t, "DueAt of exported "+info.ID, info.DueAt, start, end)
		}
	}
	if page := s.exportAll(t, x, mover, 2); !slices.Equal(infoIDs(page), want[:2]) {
		t.Errorf("ExportBatch with limit 2 returned %v; want the first two in append order, %v", infoIDs(page), want[:2])
	}
	// Nothing was claimed or changed: the claims that came back are
	// fetched by the new holder.
	expectIDs(t, "fetch by the mover after the exports", s.fetch(t, mover, 10), "c1", "d1", "u1")
}

// exportFenced: ExportBatch and RemoveExported with a lease that is not
// live fail with ErrLeaseLost and change nothing; a non-positive limit is
// ErrInvalidArgument.
func exportFenced[Tx any](t *testing.T, s *env[Tx]) {
	x := s.exporter(t)
	s.appendCommit(t, entry("e1", "k"), entry("e2", "k"))
	old := s.acquire(t, 0, s.owner("first"), longTTL)
	s.releaseLease(t, old)
	cur := s.acquire(t, 0, s.owner("second"), longTTL)
	if got, err := x.ExportBatch(s.ctx, old, 10); !errors.Is(err, outbox.ErrLeaseLost) {
		t.Errorf("ExportBatch with the released lease %s: %v, %v; want an error wrapping ErrLeaseLost", fmtLease(old), infoIDs(got), err)
	}
	if err := x.RemoveExported(s.ctx, old, []string{"e1", "e2"}); !errors.Is(err, outbox.ErrLeaseLost) {
		t.Errorf("RemoveExported with the released lease %s: %v; want an error wrapping ErrLeaseLost", fmtLease(old), err)
	}
	if _, err := x.ExportBatch(s.ctx, cur, 0); !errors.Is(err, outbox.ErrInvalidArgument) {
		t.Errorf("ExportBatch with limit 0: %v; want an error wrapping ErrInvalidArgument", err)
	}
	if got := infoIDs(s.exportAll(t, x, cur, 10)); !slices.Equal(got, []string{"e1", "e2"}) {
		t.Errorf("ExportBatch by the holder after the refused calls returned %v; want e1 e2", got)
	}
	expectIDs(t, "fetch by the holder after the refused calls and the exports", s.fetch(t, cur, 10), "e1", "e2")
}

// exportRemove: RemoveExported removes entries in every state, ignores
// unknown IDs and those of other partitions, is idempotent, and the
// removed entries are gone from Lookup, Stats, exports and fetches.
func exportRemove[Tx any](t *testing.T, s *env[Tx]) {
	x := s.exporter(t)
	keys := keysByPartition(2)
	sched := entry("sched", keys[0]+"-s")
	for outbox.PartitionOf(sched.Key, 2) != 0 {
		sched.Key += "x"
	}
	sched.NotBefore = time.Now().Add(time.Hour)
	s.appendCommit(t, entry("retrying", keys[0]), entry("parked", keys[0]), entry("claimed", keys[0]), sched, entry("due", keys[0]), entry("kept", keys[0]), entry("other", keys[1]))
	l := s.acquire(t, 0, s.owner("mover"), longTTL)
	expectIDs(t, "first fetch", s.fetch(t, l, 3), "retrying", "parked", "claimed")
	s.markFailed(t, l,
		outbox.Failure{ID: "retrying", Error: "later", Delay: time.Hour},
		outbox.Failure{ID: "parked", Error: "poison", Park: true})
	gone := []string{"retrying", "parked", "claimed", "sched", "due"}
	for range 2 {
		if err := x.RemoveExported(s.ctx, l, append(slices.Clone(gone), "never-appended", "other")); err != nil {
			t.Fatalf("RemoveExported(%v, never-appended, other): %v; want nil (unknown IDs and IDs of another partition are ignored; a repeat is a no-op)", gone, err)
		}
	}
	if err := x.RemoveExported(s.ctx, l, nil); err != nil {
		t.Errorf("RemoveExported with no IDs: %v; want nil", err)
	}
	if got := infoIDs(s.exportAll(t, x, l, 10)); !slices.Equal(got, []string{"kept"}) {
		t.Errorf("ExportBatch after RemoveExported returned %v; want only kept", got)
	}
	expectIDs(t, "fetch after RemoveExported", s.fetch(t, l, 10), "kept")
	expectIDs(t, "fetch of partition 1 (other is of partition 1, so RemoveExported of partition 0 left it)", s.peek(t, 1), "other")
	if lk, ok := s.b.(outbox.Looker); ok {
		for _, id := range gone {
			if info, err := lk.Lookup(s.ctx, id); !errors.Is(err, outbox.ErrNotFound) {
				t.Errorf("Lookup(%s) after RemoveExported: %s, %v; want an error wrapping ErrNotFound", id, fmtInfo(info), err)
			}
		}
	}
	if in, ok := s.b.(outbox.Inspector); ok {
		st, err := in.Stats(s.ctx)
		if err != nil {
			t.Fatalf("Stats: %v", err)
		}
		if st.Pending != 2 || st.Parked != 0 {
			t.Errorf("Stats after RemoveExported: %+v; want Pending 2 (kept and other), Parked 0", st)
		}
	}
}

// importRoundTrip: entries of every state, exported from an outbox with
// another partition count, are imported into the partition their key maps
// to here, whole, and behave as their state says.
func importRoundTrip[Tx any](t *testing.T, s *env[Tx]) {
	im := s.importer(t)
	x := s.exporter(t)
	now := time.Now().Truncate(time.Millisecond)
	due := exported("due", "k-due", now.Add(-time.Hour))
	due.Payload = append([]byte{0, 0xff, 0}, "ünïcode"...)
	due.Headers["second"] = "ünïcode header"
	retrying := exported("retrying", "k-retry", now.Add(time.Hour))
	retrying.Attempts, retrying.LastError = 2, "broker down"
	sched := exported("sched", "k-sched", now.Add(time.Hour))
	sched.NotBefore = sched.DueAt
	parked := exported("parked", "k-parked", time.Time{})
	parked.Attempts, parked.LastError, parked.Parked = 3, "poison", true
	keyless := exported("keyless", "", now.Add(-time.Minute))
	all := []outbox.EntryInfo{due, retrying, sched, parked, keyless}
	s.imports(t, im, len(all), all...)

	byPart := map[int][]outbox.EntryInfo{}
	for p := range s.parts {
		l := s.acquire(t, p, s.owner("exporter"), longTTL)
		byPart[p] = s.exportAll(t, x, l, 100)
		s.releaseLease(t, l)
	}
	for _, want := range all {
		p := outbox.PartitionOf(want.Key, s.parts)
		i := slices.IndexFunc(byPart[p], func(info outbox.EntryInfo) bool { return info.ID == want.ID })
		if i < 0 {
			t.Errorf("imported %s (key %q) is not in the export of partition %d (PartitionOf its key over %d partitions; the Partition field it came with, 5, is ignored); partition %d holds %v",
				want.ID, want.Key, p, s.parts, p, infoIDs(byPart[p]))
			continue
		}
		want.Partition = p
		if d := sameInfo(want, byPart[p][i]); d != "" {
			t.Errorf("imported %s exported back as %s: %s", want.ID, fmtInfo(byPart[p][i]), d)
		}
	}
	// Only the due entries are fetched, each in its partition.
	var fetched []string
	for p := range s.parts {
		fetched = append(fetched, ids(s.peek(t, p))...)
	}
	slices.Sort(fetched)
	if !slices.Equal(fetched, []string{"due", "keyless"}) {
		t.Errorf("fetching every partition after the import returned %v; want due and keyless (retrying and sched are due in an hour, parked is parked)", fetched)
	}
}

// importIdempotent: an ID the outbox holds, appended or imported, or
// repeated in one call, is skipped, and Import counts what it added.
func importIdempotent[Tx any](t *testing.T, s *env[Tx]) {
	im := s.importer(t)
	s.appendCommit(t, entry("appended", "k"))
	dup := exported("appended", "k", time.Now().Add(-time.Hour))
	dup.Payload = []byte("the imported copy")
	first := exported("imported", "k", time.Now().Add(-time.Hour))
	again := first
	again.Payload = []byte("a repeat in the same call")
	s.imports(t, im, 1, dup, first, again)
	s.imports(t, im, 0, first, dup)
	got := s.peek(t, 0)
	expectIDs(t, "fetch after importing an appended ID, a new one and the new one again (twice)", got, "imported", "appended")
	if d := sameEntry(entry("imported", "k"), got[0]); d != "" {
		t.Errorf("imported: %s; the first occurrence of an ID wins", d)
	}
	if d := sameEntry(entry("appended", "k"), got[1]); d != "" {
		t.Errorf("appended: %s; an import of an ID already appended is skipped", d)
	}
}

// dueAt reads an entry's due time by the store's clock through Looker (or
// skips the case).
func (s *env[Tx]) dueAt(t *testing.T, id string) time.Time {
	t.Helper()
	lk, ok := s.b.(outbox.Looker)
	if !ok {
		t.Skipf("the backend (%T) does not implement outbox.Looker, which this case reads the store's due time with", s.b)
	}
	info := s.lookup(t, lk, id)
	if info.DueAt.IsZero() {
		t.Fatalf("Lookup(%s) of a pending entry returned %s with a zero DueAt", id, fmtInfo(info))
	}
	return info.DueAt
}

// importBeforeAppended is the core promise: imported entries come before
// the entries appended to the outbox, in each key's order, even those
// appended before the import and due as early; among themselves in the
// order imported.
func importBeforeAppended[Tx any](t *testing.T, s *env[Tx]) {
	im := s.importer(t)
	s.appendCommit(t, entry("app1", "k"), entry("app2", "k"))
	due := s.dueAt(t, "app1")
	s.imports(t, im, 2, exported("imp1", "k", due), exported("imp2", "k", due))
	s.imports(t, im, 1, exported("imp3", "k", due))
	expectIDs(t, "fetch of key k after appending app1, app2 and then importing imp1, imp2 (one call) and imp3, all due at app1's due time: imported entries come first, in the order imported", s.peek(t, 0),
		"imp1", "imp2", "imp3", "app1", "app2")
}

// importHoldsBack: an imported entry that was attempted and is not parked
// holds back the entries of its key appended here, before or after the
// import, due or not, until it is sent; other keys flow.
func importHoldsBack[Tx any](t *testing.T, s *env[Tx]) {
	im := s.importer(t)
	s.appendCommit(t, entry("app-k", "k"), entry("app-m", "m"), entry("free", "j"))
	dueRetry := exported("imp-k", "k", time.Now().Add(-time.Hour))
	dueRetry.Attempts, dueRetry.LastError = 1, "timeout"
	laterRetry := exported("imp-m", "m", time.Now().Add(time.Hour))
	laterRetry.Attempts, laterRetry.LastError = 4, "timeout"
	s.imports(t, im, 2, dueRetry, laterRetry)
	s.appendCommit(t, entry("app-k2", "k"))
	l := s.acquire(t, 0, s.owner("relay"), longTTL)
	batch := s.fetch(t, l, 10)
	expectIDs(t, "fetch after importing imp-k (attempted, due) and imp-m (attempted, due in an hour): they hold back app-k, app-k2 and app-m", batch, "imp-k", "free")
	if batch[0].Attempts != 1 || batch[0].LastError != "timeout" {
		t.Errorf("fetched imp-k with Attempts %d, LastError %q; want 1, \"timeout\" as imported", batch[0].Attempts, batch[0].LastError)
	}
	s.markSent(t, l, "imp-k", "free")
	expectIDs(t, "fetch after imp-k was sent", s.fetch(t, l, 10), "app-k", "app-k2")
}

// importLowered: in a held outbox, an imported entry that is due is made
// due no later than the time the outbox was first held, so it comes out
// before the entries appended since, whatever the source's clock said; a
// scheduled one keeps its due time.
func importLowered[Tx any](t *testing.T, s *env[Tx]) {
	im := s.importer(t)
	h := s.holder(t)
	hs := s.hold(t, h, "moving")
	// app1 is appended a moment after the hold, so a due time left at
	// app1's (not lowered) is later than Since.
	s.sleep(t, 20*time.Millisecond)
	s.appendCommit(t, entry("app1", "k"))
	due := s.dueAt(t, "app1")
	sched := exported("sched", "k", time.Now().Add(time.Hour).Truncate(time.Millisecond))
	s.imports(t, im, 2, exported("imp1", "k", due), sched)
	lk := s.b.(outbox.Looker) // dueAt checked it
	got := s.lookup(t, lk, "imp1")
	// Stores keep times to the millisecond or better.
	if got.DueAt.IsZero() || got.DueAt.After(hs.Since.Add(time.Millisecond)) {
		t.Errorf("imp1, imported due at %s into an outbox held since %s, has DueAt %s; want it lowered to the hold's Since or earlier", fmtTime(due), fmtTime(hs.Since), fmtTime(got.DueAt))
	}
	got = s.lookup(t, lk, "sched")
	expectBetween(t, "DueAt of sched, imported due in an hour (it keeps it)", got.DueAt, sched.DueAt, sched.DueAt)
	if err := h.Unhold(s.ctx); err != nil {
		t.Fatalf("Unhold: %v", err)
	}
	expectIDs(t, "fetch after Unhold", s.peek(t, 0), "imp1", "app1")
}

// importSkewedDue: an entry that was due at its source (never attempted,
// no NotBefore: due since it was appended there) but whose DueAt is a
// few seconds ahead of this store's clock (the source's clock runs ahead)
// is still due here, and comes before the entries appended to its key
// ("even across clock skew between the two stores"), in a held outbox as
// a move imports.
func importSkewedDue[Tx any](t *testing.T, s *env[Tx]) {
	im := s.importer(t)
	h := s.holder(t)
	s.hold(t, h, "moving")
	s.sleep(t, 20*time.Millisecond)
	s.appendCommit(t, entry("app1", "k"))
	ahead := exported("imp1", "k", time.Now().Add(5*time.Second).Truncate(time.Millisecond))
	s.imports(t, im, 1, ahead)
	if err := h.Unhold(s.ctx); err != nil {
		t.Fatalf("Unhold: %v", err)
	}
	expectIDs(t, "fetch after holding, appending app1, importing imp1 (never attempted, no NotBefore, DueAt 5 s ahead of this clock: a source whose clock runs ahead) to its key, and unholding: imp1 was due at its source, so it comes first", s.peek(t, 0),
		"imp1", "app1")
}

// importInvalid: an entry that breaks a rule Import checks fails the call
// with ErrInvalidEntry, and nothing of the call is added.
func importInvalid[Tx any](t *testing.T, s *env[Tx]) {
	im := s.importer(t)
	due := time.Now().Add(-time.Hour)
	for _, c := range []struct {
		what  string
		spoil func(*outbox.EntryInfo)
	}{
		{"an empty ID", func(e *outbox.EntryInfo) { e.ID = "" }},
		{"an ID over MaxIDLen", func(e *outbox.EntryInfo) { e.ID = strings.Repeat("i", outbox.MaxIDLen+1) }},
		{"an empty topic (not parked)", func(e *outbox.EntryInfo) { e.Topic = "" }},
		{"a topic over MaxTopicLen", func(e *outbox.EntryInfo) { e.Topic = strings.Repeat("t", outbox.MaxTopicLen+1) }},
		{"a key over MaxKeyLen", func(e *outbox.EntryInfo) { e.Key = strings.Repeat("k", outbox.MaxKeyLen+1) }},
	} {
		bad := exported("bad", "k", due)
		c.spoil(&bad)
		n, err := im.Import(s.ctx, []outbox.EntryInfo{exported("valid", "k", due), bad})
		if !errors.Is(err, outbox.ErrInvalidEntry) {
			t.Errorf("Import of a valid entry and one with %s: %d, %v; want an error wrapping ErrInvalidEntry", c.what, n, err)
		}
	}
	if got := s.peek(t, 0); len(got) != 0 {
		t.Errorf("fetch after the refused imports returned %v; nothing of a refused call is added", ids(got))
	}
	s.imports(t, im, 1, exported("valid", "k", due))
}

// importParkedNoTopic: a parked entry without a topic is accepted, stays
// parked, and is never fetched.
func importParkedNoTopic[Tx any](t *testing.T, s *env[Tx]) {
	im := s.importer(t)
	x := s.exporter(t)
	p := exported("no-topic", "k", time.Time{})
	p.Topic, p.Parked, p.Attempts, p.LastError = "", true, 1, "no topic"
	s.imports(t, im, 1, p)
	if got := s.peek(t, 0); len(got) != 0 {
		t.Errorf("fetch after importing a parked entry returned %v", ids(got))
	}
	if in, ok := s.b.(outbox.Inspector); ok {
		n, err := in.Requeue(s.ctx, "no-topic")
		if n != 0 || !errors.Is(err, outbox.ErrNotRequeueable) {
			t.Errorf("Requeue of an imported parked entry without a topic: %d, %v; want 0 and an error wrapping ErrNotRequeueable (it can never be published)", n, err)
		}
	}
	l := s.acquire(t, 0, s.owner("exporter"), longTTL)
	got := s.exportAll(t, x, l, 10)
	if len(got) != 1 {
		t.Fatalf("ExportBatch after importing no-topic returned %v; want no-topic", infoIDs(got))
	}
	p.Partition = 0
	if d := sameInfo(p, got[0]); d != "" {
		t.Errorf("no-topic exported back as %s: %s", fmtInfo(got[0]), d)
	}
}

// holdFetchesNothing: a held outbox hands nothing out while entries are
// due, appends and stats work, HoldState reports the reason and Since,
// and Unhold lets the entries out.
func holdFetchesNothing[Tx any](t *testing.T, s *env[Tx]) {
	h := s.holder(t)
	if hs := s.holdState(t, h); hs.Held {
		t.Fatalf("HoldState of a new outbox: %+v; want not held", hs)
	}
	keys := keysByPartition(2)
	s.appendCommit(t, entry("before", keys[0]))
	start := time.Now()
	hs := s.hold(t, h, "moving to the new cluster")
	end := time.Now()
	if !hs.Held || hs.Reason != "moving to the new cluster" {
		t.Errorf("HoldState after Hold: %+v; want Held with the reason given", hs)
	}
	expectBetween(t, "HoldState.Since", hs.Since, start, end)
	s.appendCommit(t, entry("after", keys[0]), entry("p1", keys[1]))
	for p := range 2 {
		l := s.acquire(t, p, s.owner("relay"), longTTL)
		if got := s.fetch(t, l, 10); len(got) != 0 {
			t.Errorf("FindPendingBatch of partition %d of a held outbox returned %v; want nothing", p, ids(got))
		}
		if bf, ok := s.b.(outbox.BatchFetcher); ok {
			if b, err := bf.FetchBatch(s.ctx, l, 10); err != nil || len(b.Entries) != 0 {
				t.Errorf("FetchBatch of partition %d of a held outbox: %v, %v; want nothing", p, ids(b.Entries), err)
			}
		}
		s.releaseLease(t, l)
	}
	if in, ok := s.b.(outbox.Inspector); ok {
		st, err := in.Stats(s.ctx)
		if err != nil {
			t.Fatalf("Stats of a held outbox: %v", err)
		}
		if st.Pending != 3 || st.Due != 3 {
			t.Errorf("Stats of a held outbox with 3 due entries: %+v; want Pending 3, Due 3", st)
		}
	}
	if err := h.Unhold(s.ctx); err != nil {
		t.Fatalf("Unhold: %v", err)
	}
	if hs := s.holdState(t, h); hs.Held || hs.Reason != "" || !hs.Since.IsZero() {
		t.Errorf("HoldState after Unhold: %+v; want not held, no reason, a zero Since", hs)
	}
	expectIDs(t, "fetch of partition 0 after Unhold", s.peek(t, 0), "before", "after")
	expectIDs(t, "fetch of partition 1 after Unhold", s.peek(t, 1), "p1")
}

// holdKeepsSince: holding a held outbox keeps its first Since and
// replaces the reason; unholding an outbox that is not held is a no-op.
func holdKeepsSince[Tx any](t *testing.T, s *env[Tx]) {
	h := s.holder(t)
	if err := h.Unhold(s.ctx); err != nil {
		t.Fatalf("Unhold of an outbox that is not held: %v; want nil", err)
	}
	first := s.hold(t, h, "first")
	s.sleep(t, 20*time.Millisecond) // so a reset Since would differ
	second := s.hold(t, h, "second")
	if !second.Held || second.Reason != "second" || !second.Since.Equal(first.Since) {
		t.Errorf("HoldState after Hold(first) then Hold(second): %+v; want held, reason \"second\", the first Since %s", second, fmtTime(first.Since))
	}
	s.appendCommit(t, entry("e1", "k"))
	l := s.acquire(t, 0, s.owner("relay"), longTTL)
	if got := s.fetch(t, l, 10); len(got) != 0 {
		t.Errorf("fetch after a second Hold returned %v; want nothing", ids(got))
	}
}

// appendErr appends e in a transaction and returns the error of
// AppendInTx or, when it succeeded, of the commit.
func (s *env[Tx]) appendErr(t *testing.T, e outbox.Entry) error {
	t.Helper()
	tx := s.begin(t)
	if err := s.b.AppendInTx(s.ctx, tx, e); err != nil {
		_ = s.h.Rollback(s.ctx, tx)
		return err
	}
	return s.h.Commit(s.ctx, tx)
}

// sealRefuses: a sealed outbox refuses appends with ErrSealed, and serves
// the entries it has (fetch, mark, export) as before; Unseal accepts
// appends again.
func sealRefuses[Tx any](t *testing.T, s *env[Tx]) {
	sl := s.sealer(t)
	s.appendCommit(t, entry("e1", "k"), entry("e2", "k"))
	if sealed, err := sl.Sealed(s.ctx); err != nil || sealed {
		t.Fatalf("Sealed of a new outbox: %v, %v; want false", sealed, err)
	}
	for range 2 {
		if err := sl.Seal(s.ctx); err != nil {
			t.Fatalf("Seal: %v", err)
		}
	}
	if sealed, err := sl.Sealed(s.ctx); err != nil || !sealed {
		t.Fatalf("Sealed after Seal: %v, %v; want true", sealed, err)
	}
	if err := s.appendErr(t, entry("refused", "k")); !errors.Is(err, outbox.ErrSealed) {
		t.Fatalf("append to a sealed outbox: %v; want an error wrapping ErrSealed (from AppendInTx or the commit)", err)
	}
	l := s.acquire(t, 0, s.owner("relay"), longTTL)
	expectIDs(t, "fetch of a sealed outbox", s.fetch(t, l, 1), "e1")
	s.markFailed(t, l, outbox.Failure{ID: "e1", Error: "once", Delay: -time.Hour})
	expectIDs(t, "fetch of a sealed outbox after a failure", s.fetch(t, l, 10), "e1")
	s.markSent(t, l, "e1")
	// Requeue works on a sealed outbox (Sealer's doc): e2 parked, then
	// requeued, is fetched again.
	if in, ok := s.b.(outbox.Inspector); ok {
		expectIDs(t, "fetch of e2 on a sealed outbox", s.fetch(t, l, 10), "e2")
		s.markFailed(t, l, outbox.Failure{ID: "e2", Error: "poison", Park: true})
		if n, err := in.Requeue(s.ctx, "e2"); err != nil || n != 1 {
			t.Fatalf("Requeue on a sealed outbox: %d, %v; want 1 requeued", n, err)
		}
	}
	if x, ok := s.b.(outbox.Exporter); ok {
		if got := infoIDs(s.exportAll(t, x, l, 10)); !slices.Equal(got, []string{"e2"}) {
			t.Errorf("ExportBatch of a sealed outbox returned %v; want e2 (the refused append left nothing)", got)
		}
	}
	for range 2 {
		if err := sl.Unseal(s.ctx); err != nil {
			t.Fatalf("Unseal: %v", err)
		}
	}
	if sealed, err := sl.Sealed(s.ctx); err != nil || sealed {
		t.Fatalf("Sealed after Unseal: %v, %v; want false", sealed, err)
	}
	s.appendCommit(t, entry("e3", "k"))
	expectIDs(t, "fetch after Unseal", s.fetch(t, l, 10), "e2", "e3")
}

// sealOpenTx: an append in a transaction open when Seal is called either
// commits before Seal returns (and is kept) or fails with ErrSealed (and
// leaves nothing). Seal may wait for the transaction, so the case commits
// while Seal runs, when Seal has not returned within a moment.
func sealOpenTx[Tx any](t *testing.T, s *env[Tx]) {
	sl := s.sealer(t)
	tx := s.begin(t)
	if err := s.b.AppendInTx(s.ctx, tx, entry("open", "k")); err != nil {
		t.Fatalf("AppendInTx before Seal: %v", err)
	}
	sealed := make(chan error, 1)
	go func() { sealed <- sl.Seal(s.ctx) }()
	var sealErr error
	sealReturned := false
	select {
	case sealErr = <-sealed:
		sealReturned = true
	case <-time.After(200 * time.Millisecond): // Seal waits for tx, or is slow
	}
	commitErr := s.h.Commit(s.ctx, tx)
	if !sealReturned {
		select {
		case sealErr = <-sealed:
		case <-s.ctx.Done():
			t.Fatalf("watchdog: Seal did not return after the open transaction committed")
		}
	}
	if sealErr != nil {
		t.Fatalf("Seal: %v", sealErr)
	}
	got := s.peek(t, 0)
	switch {
	case commitErr == nil && sealReturned:
		t.Errorf("the commit of a transaction open when Seal was called succeeded after Seal returned (fetch: %v); once Seal returns, no append commits", ids(got))
	case commitErr == nil:
		expectIDs(t, "fetch after the commit that succeeded before Seal returned", got, "open")
	case !errors.Is(commitErr, outbox.ErrSealed):
		t.Errorf("the commit of a transaction open when Seal was called: %v; want nil (before Seal returned) or an error wrapping ErrSealed", commitErr)
	default:
		expectIDs(t, "fetch after the commit failed with ErrSealed", got)
	}
}
