package ui_test

// Tests of /api/blocked beyond TestBlockedKeys: the bound of a partition's
// scan, and an entry deferred by an open breaker.

import (
	"context"
	"fmt"
	"net/url"
	"testing"
	"time"

	"github.com/outboxrelay/outbox"
	"github.com/outboxrelay/outbox/backends/memory"
	"github.com/outboxrelay/outbox/ui"
)

// TestBlockedByPartitionIsBounded: /api/blocked?partition= reads at most
// 10,000 blocked keys per request; when none of them is of the partition
// the page is empty with a next_after, from which the partition's keys
// follow.
func TestBlockedByPartitionIsBounded(t *testing.T) {
	if testing.Short() {
		t.Skip("slow: blocks 21,000 keys")
	}
	t.Parallel()
	clk := newClock()
	b := memory.New(memory.Options{Partitions: 2, Now: clk.Now})
	t.Cleanup(func() { _ = b.Close() })
	ctx := context.Background()
	var es []outbox.Entry
	for i := range 21_000 {
		es = append(es, outbox.Entry{ID: fmt.Sprintf("h-%05d", i), Topic: "t", Key: fmt.Sprintf("k-%05d", i)})
	}
	if err := b.Append(ctx, es...); err != nil {
		t.Fatal(err)
	}
	// Every key of partition 0 is blocked first, then those of partition 1.
	blocked := map[int]int{}
	for p := range 2 {
		clk.Add(time.Minute)
		lease, err := b.AcquireLease(ctx, p, "relay", time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		batch, err := b.FindPendingBatch(ctx, lease, 30_000)
		if err != nil {
			t.Fatal(err)
		}
		fs := make([]outbox.Failure, len(batch))
		for i, e := range batch {
			fs[i] = outbox.Failure{ID: e.ID, Error: "down", Delay: time.Hour}
		}
		if err := b.MarkFailed(ctx, lease, fs); err != nil {
			t.Fatal(err)
		}
		blocked[p] = len(batch)
	}
	if blocked[0] < 10_000 {
		t.Fatalf("partition 0 has %d keys; the test needs 10,000 or more", blocked[0])
	}
	c := newClient(t, newServer(t, b, ui.Options{Now: clk.Now}))
	var p blockedPage
	c.getJSON("/api/blocked?partition=1&limit=500", &p)
	if len(p.Keys) != 0 || p.NextAfter == nil {
		t.Fatalf("the first request: %d keys, next %v; want none of partition 1 among the first 10,000, and a next_after", len(p.Keys), p.NextAfter)
	}
	got := 0
	for after := *p.NextAfter; ; {
		c.getJSON("/api/blocked?partition=1&limit=500&after="+url.QueryEscape(after), &p)
		for _, k := range p.Keys {
			if k.Head.Partition != 1 {
				t.Fatalf("partition=1 lists %s of partition %d", k.Head.ID, k.Head.Partition)
			}
		}
		got += len(p.Keys)
		if p.NextAfter == nil {
			break
		}
		after = *p.NextAfter
	}
	if got != blocked[1] {
		t.Errorf("partition=1 listed %d keys over its pages, want %d", got, blocked[1])
	}
}

// TestDeferredEntry: an entry an open breaker deferred before its first
// attempt is scheduled, says deferred in the listing and on its page, and
// holds back its key.
func TestDeferredEntry(t *testing.T) {
	t.Parallel()
	clk := newClock()
	b := memory.New(memory.Options{Now: clk.Now})
	t.Cleanup(func() { _ = b.Close() })
	ctx := context.Background()
	for _, id := range []string{"d-1", "d-2"} {
		if err := b.Append(ctx, outbox.Entry{ID: id, Topic: "t", Key: "k"}); err != nil {
			t.Fatal(err)
		}
	}
	lease, err := b.AcquireLease(ctx, 0, "relay", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	batch, err := b.FindPendingBatch(ctx, lease, 1)
	if err != nil || len(batch) != 1 || batch[0].ID != "d-1" {
		t.Fatalf("fetch: %v %v", batch, err)
	}
	if err := b.MarkFailed(ctx, lease, []outbox.Failure{{ID: "d-1", Error: "breaker open", Delay: 10 * time.Minute, Deferred: true}}); err != nil {
		t.Fatal(err)
	}
	c := newClient(t, newServer(t, b, ui.Options{Now: clk.Now}))
	var p listPage
	c.getJSON("/api/entries?state=scheduled", &p)
	if len(p.Entries) != 1 || p.Entries[0].ID != "d-1" || !p.Entries[0].Deferred || p.Entries[0].Attempts != 0 {
		t.Errorf("scheduled: %+v, want d-1 deferred with 0 attempts", p.Entries)
	}
	var d struct {
		Status   string `json:"status"`
		Deferred bool   `json:"deferred"`
	}
	c.getJSON("/api/entries/d-1", &d)
	if d.Status != "scheduled" || !d.Deferred {
		t.Errorf("d-1: %+v, want scheduled and deferred", d)
	}
	var bp blockedPage
	c.getJSON("/api/blocked", &bp)
	if len(bp.Keys) != 1 || bp.Keys[0].Head.ID != "d-1" || !bp.Keys[0].Head.Deferred || bp.Keys[0].Waiting != 1 {
		t.Errorf("blocked: %+v, want k held back by d-1 (deferred), 1 waiting", bp.Keys)
	}
}
