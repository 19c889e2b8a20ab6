package conformance

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/outboxrelay/outbox"
)

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
