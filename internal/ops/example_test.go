package ops_test

import (
	"context"
	"fmt"
	"time"

	"github.com/outboxrelay/outbox"
	"github.com/outboxrelay/outbox/backends/memory"
	"github.com/outboxrelay/outbox/internal/ops"
)

// A front end's bulk requeue by filter: parse what the operator typed,
// collect the parked entries that match, oldest first, and requeue them in
// chunks, reporting each chunk.
func Example() {
	ctx := context.Background()
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	store := memory.New(memory.Options{})
	var parked []outbox.EntryInfo
	for i, topic := range []string{"orders", "payments", "orders", "orders"} {
		e := outbox.Entry{ID: fmt.Sprint("e", i), Topic: topic, Key: "k", LastError: "timeout", CreatedAt: now.Add(-time.Duration(i) * time.Hour)}
		parked = append(parked, outbox.EntryInfo{Entry: e, Parked: true})
	}
	if _, err := store.Import(ctx, parked); err != nil {
		panic(err)
	}

	f, err := ops.ParseFilter(ops.FilterSpec{Topic: "orders", Since: "1d"}, now)
	if err != nil {
		panic(err) // a *ops.FieldError or *ops.RangeError: name the input
	}
	es, _, err := ops.Collect(ctx, store, f, ops.CollectOptions{})
	if err != nil {
		panic(err)
	}
	ops.ByCreation(es)
	fmt.Println("requeue", f.Describe()+":", ops.IDs(es))
	res, err := ops.Requeue(ctx, store, ops.IDs(es), ops.RequeueOptions{Batch: 2, Progress: func(c ops.RequeueChunk) {
		fmt.Println("  chunk", c.IDs, "requeued", c.Requeued)
	}})
	if err != nil {
		panic(err)
	}
	fmt.Println("requeued", res.Requeued)
	// Output:
	// requeue topic "orders", created since 2026-02-28T12:00:00Z: [e3 e2 e0]
	//   chunk [e3 e2] requeued 2
	//   chunk [e0] requeued 1
	// requeued 3
}
