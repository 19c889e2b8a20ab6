package history

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

var t0 = time.Date(2026, 1, 2, 15, 0, 0, 0, time.UTC)

func ms(n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }

// deliverAll delivers ids on topic t partition p from offset 0, one per ms.
func deliverAll(h *History, p int32, ids ...string) {
	for i, id := range ids {
		h.Delivered(Delivery{Topic: "t", Partition: p, Offset: int64(i), ID: id, At: ms(i)})
	}
}

func appendKey(h *History, key string, n int) []string {
	ids := make([]string, n)
	for i := range n {
		ids[i] = fmt.Sprintf("%s-%d", key, i+1)
		h.Append(Entry{ID: ids[i], Key: key, Seq: int64(i + 1)})
	}
	return ids
}

func TestCheck(t *testing.T) {
	t.Parallel()

	t.Run("CleanHistoryPasses", func(t *testing.T) {
		t.Parallel()
		var h History
		a := appendKey(&h, "a", 3)
		b := appendKey(&h, "b", 3)
		deliverAll(&h, 0, a[0], b[0], a[1], b[1], b[2], a[2])
		r := h.Check()
		if !r.OK() || r.Duplicates != 0 || r.Appended != 6 || r.Delivered != 6 {
			t.Fatalf("clean history: %v", r)
		}
	})

	t.Run("LostEntryReported", func(t *testing.T) {
		t.Parallel()
		var h History
		a := appendKey(&h, "a", 3)
		deliverAll(&h, 0, a[0], a[2])
		r := h.Check()
		if r.OK() || len(r.Lost) != 1 || r.Lost[0].ID != "a-2" || len(r.OrderViolations) != 0 {
			t.Fatalf("want a-2 lost and no order violation (a gap is not disorder): %v", r)
		}
		if !strings.Contains(r.String(), "lost: id a-2") {
			t.Errorf("String does not name the lost entry: %s", r)
		}
	})

	t.Run("DuplicateCounted", func(t *testing.T) {
		t.Parallel()
		var h History
		a := appendKey(&h, "a", 3)
		deliverAll(&h, 0, a[0], a[1], a[1], a[2])
		r := h.Check()
		if !r.OK() || r.Duplicates != 1 || r.DuplicatesBeforeFaults != 1 {
			t.Fatalf("want OK with 1 duplicate: %v", r)
		}
	})

	t.Run("RedeliveryOfEarlierEntryIsNotDisorder", func(t *testing.T) {
		t.Parallel()
		// A relay crash re-publishes a batch: 1 2 3 1 2 3 4.
		var h History
		a := appendKey(&h, "a", 4)
		deliverAll(&h, 0, a[0], a[1], a[2], a[0], a[1], a[2], a[3])
		r := h.Check()
		if !r.OK() || r.Duplicates != 3 {
			t.Fatalf("want OK with 3 duplicates: %v", r)
		}
	})

	t.Run("RereadIsNotDuplicate", func(t *testing.T) {
		t.Parallel()
		var h History
		a := appendKey(&h, "a", 2)
		deliverAll(&h, 0, a...)
		deliverAll(&h, 0, a...) // the consumer restarted and read again
		r := h.Check()
		if !r.OK() || r.Duplicates != 0 || r.Rereads != 2 || r.Delivered != 2 {
			t.Fatalf("want 2 rereads, no duplicate: %v", r)
		}
	})

	t.Run("OrderViolationReported", func(t *testing.T) {
		t.Parallel()
		var h History
		a := appendKey(&h, "a", 3)
		deliverAll(&h, 0, a[1], a[0], a[2])
		r := h.Check()
		if r.OK() || len(r.OrderViolations) != 1 {
			t.Fatalf("want one order violation: %v", r)
		}
		v := r.OrderViolations[0]
		if v.ID != "a-1" || v.Seq != 1 || v.After != 2 || v.AfterID != "a-2" || v.Delivery.Offset != 1 {
			t.Errorf("violation = %+v", v)
		}
	})

	t.Run("KeyOnTwoPartitionsIsDisorder", func(t *testing.T) {
		t.Parallel()
		var h History
		a := appendKey(&h, "a", 2)
		deliverAll(&h, 0, a[0])
		deliverAll(&h, 1, a[1])
		r := h.Check()
		if len(r.OrderViolations) != 1 || !strings.Contains(r.OrderViolations[0].Reason, "t/0") {
			t.Fatalf("want one violation naming the partitions: %v", r)
		}
	})

	t.Run("UnexpectedEntryReported", func(t *testing.T) {
		t.Parallel()
		var h History
		a := appendKey(&h, "a", 1)
		deliverAll(&h, 0, a[0], "rolled-back", "rolled-back")
		r := h.Check()
		if r.OK() || len(r.Unexpected) != 1 || r.Unexpected[0].ID != "rolled-back" || r.Duplicates != 1 {
			t.Fatalf("want one unexpected entry (delivered twice): %v", r)
		}
	})

	t.Run("UnknownAbsentIsNotLost", func(t *testing.T) {
		t.Parallel()
		var h History
		h.Append(Entry{ID: "a-1", Key: "a", Seq: 1})
		h.Unknown(Entry{ID: "a-2", Key: "a", Seq: 2})
		h.Append(Entry{ID: "a-3", Key: "a", Seq: 3})
		deliverAll(&h, 0, "a-1", "a-3")
		r := h.Check()
		if !r.OK() || r.Unknown != 1 || r.UnknownDelivered != 0 {
			t.Fatalf("want OK, one unknown undelivered: %v", r)
		}
	})

	t.Run("UnknownDeliveredIsOrdered", func(t *testing.T) {
		t.Parallel()
		var h History
		h.Append(Entry{ID: "a-1", Key: "a", Seq: 1})
		h.Unknown(Entry{ID: "a-2", Key: "a", Seq: 2})
		h.Append(Entry{ID: "a-3", Key: "a", Seq: 3})
		deliverAll(&h, 0, "a-1", "a-2", "a-3")
		if r := h.Check(); !r.OK() || r.UnknownDelivered != 1 {
			t.Fatalf("in order: %v", r)
		}
		var g History
		g.Append(Entry{ID: "a-1", Key: "a", Seq: 1})
		g.Unknown(Entry{ID: "a-2", Key: "a", Seq: 2})
		g.Append(Entry{ID: "a-3", Key: "a", Seq: 3})
		deliverAll(&g, 0, "a-1", "a-3", "a-2")
		if r := g.Check(); len(r.OrderViolations) != 1 || r.OrderViolations[0].ID != "a-2" {
			t.Fatalf("out of order: %v", r)
		}
	})

	t.Run("ConfirmedRetryOfUnknownCanBeLost", func(t *testing.T) {
		t.Parallel()
		var h History
		h.Unknown(Entry{ID: "a-1", Key: "a", Seq: 1})
		h.Append(Entry{ID: "a-1", Key: "a", Seq: 1})  // the retry committed
		h.Unknown(Entry{ID: "a-1", Key: "a", Seq: 1}) // ignored: already confirmed
		r := h.Check()
		if len(r.Lost) != 1 || r.Unknown != 0 || r.Appended != 1 {
			t.Fatalf("want a-1 lost: %v", r)
		}
	})

	t.Run("DuplicatesAttributedToPrecedingFault", func(t *testing.T) {
		t.Parallel()
		var h History
		a := appendKey(&h, "a", 4)
		h.Fault(ms(2), "kill 2") // recorded out of order on purpose
		h.Fault(ms(0), "kill 1")
		// offsets 0..6 at ms 0..6: a1 a2 a1 a2 a3 a3 a4
		deliverAll(&h, 0, a[0], a[1], a[0], a[1], a[2], a[2], a[3])
		r := h.Check()
		if r.Duplicates != 3 || r.DuplicatesBeforeFaults != 0 {
			t.Fatalf("want 3 duplicates after faults: %v", r)
		}
		// ms 2 and 3 are at/after "kill 2", ms 5 too.
		if r.Faults[0].What != "kill 1" || r.Faults[0].Duplicates != 0 || r.Faults[1].Duplicates != 3 {
			t.Errorf("per fault = %+v", r.Faults)
		}
		if r.MaxDuplicatesPerFault() != 3 {
			t.Errorf("MaxDuplicatesPerFault = %d", r.MaxDuplicatesPerFault())
		}
	})
}

func TestRecovery(t *testing.T) {
	t.Parallel()
	var h History
	deliverAt := func(p int32, times ...int) {
		for i, at := range times {
			id := fmt.Sprintf("p%d-%d", p, i)
			h.Append(Entry{ID: id})
			h.Delivered(Delivery{Topic: "t", Partition: p, Offset: int64(i), ID: id, At: ms(at)})
		}
	}
	// Partition 0 delivers every 10ms except a stall 100..400 and a stall
	// 600..650. Partition 1 delivers every 10ms until 500, then stops (the
	// end of the history is 1000, the last delivery of partition 0).
	// Partition 2 first delivers after the first fault: not counted for it.
	var p0, p1 []int
	for at := 0; at <= 1000; at += 10 {
		if (at > 100 && at < 400) || (at > 600 && at < 650) {
			continue
		}
		p0 = append(p0, at)
	}
	for at := 0; at <= 500; at += 10 {
		p1 = append(p1, at)
	}
	deliverAt(0, p0...)
	deliverAt(1, p1...)
	deliverAt(2, 300, 310)
	h.Fault(ms(150), "A")  // [150,450): p0 stall 100..400 from the fault: 250ms
	h.Fault(ms(450), "B")  // [450,620): p0 600..620 20ms; p1 stops at 500: 120ms; p2 silent since 310: 170ms
	h.Fault(ms(620), "B2") // [620,700): p0 620..650 30ms; p1, p2 silent: 80ms
	h.Fault(ms(700), "C")  // [700,1000]: p1, p2 silent: 300ms; p0 10ms
	h.Fault(ms(2000), "D") // after the end of the history: 0
	r := h.Check()
	want := []time.Duration{250, 170, 80, 300, 0}
	if len(r.Faults) != len(want) {
		t.Fatalf("%d faults reported, want %d", len(r.Faults), len(want))
	}
	for i, f := range r.Faults {
		if f.Recovery != want[i]*time.Millisecond {
			t.Errorf("fault %s: recovery %v, want %v", f.What, f.Recovery, want[i]*time.Millisecond)
		}
	}
	// sorted: 0 80 170 250 300; nearest rank p50 = 3rd, p90 = 5th.
	if r.RecoveryP50 != 170*time.Millisecond || r.RecoveryP90 != 300*time.Millisecond || r.RecoveryMax != 300*time.Millisecond {
		t.Errorf("p50/p90/max = %v %v %v", r.RecoveryP50, r.RecoveryP90, r.RecoveryMax)
	}
}

// Entries recorded with their outbox partition are measured per outbox
// partition: a stalled outbox partition shows even when its records share
// a broker partition with one that keeps delivering.
func TestRecoveryByOutboxPartition(t *testing.T) {
	t.Parallel()
	var h History
	off := int64(0)
	deliver := func(p int32, at int) {
		id := fmt.Sprintf("op%d-%d", p, at)
		h.Append(Entry{ID: id, Partition: &p})
		h.Delivered(Delivery{Topic: "t", Partition: 0, Offset: off, ID: id, At: ms(at)})
		off++
	}
	for at := 0; at <= 1000; at += 10 {
		deliver(0, at)
		if at <= 100 || at >= 500 {
			deliver(1, at+1)
		}
	}
	h.Fault(ms(200), "stall outbox partition 1")
	r := h.Check()
	// Outbox partition 1's last delivery before the fault is at 101, its
	// next at 501: measured from the fault, 301ms.
	if got := r.Faults[0].Recovery; got != 301*time.Millisecond {
		t.Fatalf("recovery %v, want 301ms (outbox partition 1's stall; the broker partition never stalled)", got)
	}
	// Each partition's own gap: partition 0 delivers every 10ms.
	want := map[string]time.Duration{"outbox partition 0": 10 * time.Millisecond, "outbox partition 1": 301 * time.Millisecond}
	if got := r.Faults[0].Partitions; len(got) != 2 || got["outbox partition 0"] != want["outbox partition 0"] || got["outbox partition 1"] != want["outbox partition 1"] {
		t.Fatalf("per-partition recovery %v, want %v", got, want)
	}
}

// A lost entry is attributed to the fault before its commit.
func TestLostPerFault(t *testing.T) {
	t.Parallel()
	var h History
	h.Fault(ms(100), "A")
	h.Fault(ms(200), "B")
	for i, at := range []int{50, 150, 250, 260} {
		h.Append(Entry{ID: fmt.Sprintf("e%d", i), At: ms(at)})
	}
	h.Append(Entry{ID: "no-time"})
	r := h.Check()
	if len(r.Lost) != 5 || r.LostBeforeFaults != 2 || r.Faults[0].Lost != 1 || r.Faults[1].Lost != 2 {
		t.Fatalf("lost %d, before faults %d, per fault %d %d; want 5, 2 (e0 and the one without a time), 1, 2",
			len(r.Lost), r.LostBeforeFaults, r.Faults[0].Lost, r.Faults[1].Lost)
	}
}
