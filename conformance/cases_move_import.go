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
