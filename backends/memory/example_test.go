package memory_test

import (
	"context"
	"fmt"
	"time"

	"github.com/outboxrelay/outbox"
	"github.com/outboxrelay/outbox/backends/memory"
)

// Append two entries in a transaction, then relay them by hand: lease the
// partition, claim the due entries and mark them sent.
func Example() {
	ctx := context.Background()
	b := memory.New(memory.Options{})
	defer b.Close()

	tx := b.Begin()
	err := b.AppendInTx(ctx, tx,
		outbox.Entry{ID: "order-1-created", Topic: "orders", Key: "order-1", Payload: []byte(`{"total":42}`)},
		outbox.Entry{ID: "order-1-paid", Topic: "orders", Key: "order-1", Payload: []byte(`{"paid":true}`)},
	)
	if err != nil {
		fmt.Println("append:", err)
		return
	}
	if err := tx.Commit(); err != nil {
		fmt.Println("commit:", err)
		return
	}

	lease, err := b.AcquireLease(ctx, 0, "relay-1", 30*time.Second)
	if err != nil {
		fmt.Println("lease:", err)
		return
	}
	batch, err := b.FindPendingBatch(ctx, lease, 10)
	if err != nil {
		fmt.Println("fetch:", err)
		return
	}
	var ids []string
	for _, e := range batch {
		fmt.Printf("publish %s to %s: %s\n", e.ID, e.Topic, e.Payload)
		ids = append(ids, e.ID)
	}
	if err := b.MarkSent(ctx, lease, ids); err != nil {
		fmt.Println("mark sent:", err)
		return
	}

	stats, err := b.Stats(ctx)
	if err != nil {
		fmt.Println("stats:", err)
		return
	}
	fmt.Println("pending after:", stats.Pending)
	// Output:
	// publish order-1-created to orders: {"total":42}
	// publish order-1-paid to orders: {"paid":true}
	// pending after: 0
}

// A rolled-back transaction leaves nothing behind.
func ExampleTx_Rollback() {
	ctx := context.Background()
	b := memory.New(memory.Options{})
	defer b.Close()

	tx := b.Begin()
	if err := b.AppendInTx(ctx, tx, outbox.Entry{Topic: "orders"}); err != nil {
		fmt.Println("append:", err)
		return
	}
	if err := tx.Rollback(); err != nil {
		fmt.Println("rollback:", err)
		return
	}
	stats, err := b.Stats(ctx)
	if err != nil {
		fmt.Println("stats:", err)
		return
	}
	fmt.Println("pending:", stats.Pending)
	// Output:
	// pending: 0
}
