package outbox_test

import (
	"context"
	"fmt"
	"time"

	"github.com/outboxrelay/outbox"
	"github.com/outboxrelay/outbox/backends/memory"
)

// An operator's first question in an incident, "what is stuck, and why?":
// BlockedKeys names each key held back by a failing head entry, how many
// entries wait behind it, and the head's attempts.
func ExampleLister() {
	ctx := context.Background()
	b := memory.New(memory.Options{Partitions: 1})
	defer b.Close()
	tx := b.Begin()
	for _, id := range []string{"ship-1", "ship-2", "ship-3"} {
		if err := b.AppendInTx(ctx, tx, outbox.Entry{ID: id, Topic: "shipments", Key: "order-7"}); err != nil {
			panic(err)
		}
	}
	if err := tx.Commit(); err != nil {
		panic(err)
	}

	// A relay fails the key's first entry twice; it holds the other two back.
	lease, err := b.AcquireLease(ctx, 0, "relay-1", time.Minute)
	if err != nil {
		panic(err)
	}
	for _, cause := range []string{"broker unreachable", "message too large"} {
		if _, err := b.FindPendingBatch(ctx, lease, 10); err != nil {
			panic(err)
		}
		if err := b.MarkFailed(ctx, lease, []outbox.Failure{{ID: "ship-1", Error: cause}}); err != nil {
			panic(err)
		}
	}

	var ls outbox.Lister = b
	blocked, err := ls.BlockedKeys(ctx, outbox.ListFilter{Topic: "shipments"}, outbox.BlockedKey{}, 10)
	if err != nil {
		panic(err)
	}
	for _, k := range blocked {
		fmt.Printf("key %s blocked by %s (%d attempts), %d waiting\n", k.Head.Key, k.Head.ID, k.Head.Attempts, k.Waiting)
		for i, a := range k.Head.History {
			fmt.Printf("  attempt %d by %s: %s\n", i+1, a.Owner, a.Error)
		}
	}
	// Output:
	// key order-7 blocked by ship-1 (2 attempts), 2 waiting
	//   attempt 1 by relay-1: broker unreachable
	//   attempt 2 by relay-1: message too large
}

// Pausing a topic stops its delivery for every relay of the fleet: its
// entries stay pending, with no attempt counted, until it is resumed.
func ExamplePauser() {
	ctx := context.Background()
	b := memory.New(memory.Options{Partitions: 1})
	defer b.Close()
	tx := b.Begin()
	if err := b.AppendInTx(ctx, tx,
		outbox.Entry{ID: "ship-1", Topic: "shipments", Key: "order-7"},
		outbox.Entry{ID: "mail-1", Topic: "mails", Key: "order-8"},
	); err != nil {
		panic(err)
	}
	if err := tx.Commit(); err != nil {
		panic(err)
	}

	var p outbox.Pauser = b
	if err := p.PauseTopic(ctx, "shipments"); err != nil {
		panic(err)
	}
	lease, err := b.AcquireLease(ctx, 0, "relay-1", time.Minute)
	if err != nil {
		panic(err)
	}
	fetch := func() {
		batch, err := b.FindPendingBatch(ctx, lease, 10)
		if err != nil {
			panic(err)
		}
		for _, e := range batch {
			fmt.Println("fetched", e.ID)
		}
		if err := b.Release(ctx, lease, []string{"ship-1", "mail-1"}); err != nil {
			panic(err)
		}
	}
	fetch()
	paused, err := p.Paused(ctx)
	if err != nil {
		panic(err)
	}
	fmt.Println("paused topics:", len(paused.Topics), paused.Topics[0].Topic)

	if err := p.ResumeTopic(ctx, "shipments"); err != nil {
		panic(err)
	}
	fetch()
	// Output:
	// fetched mail-1
	// paused topics: 1 shipments
	// fetched ship-1
	// fetched mail-1
}
