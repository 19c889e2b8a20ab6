package move_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/outboxrelay/outbox"
	"github.com/outboxrelay/outbox/backends/memory"
	"github.com/outboxrelay/outbox/move"
)

// A move from a 2-partition outbox to an 8-partition one: prepare (hold
// the destination), roll the services over (they append to the
// destination), then run the move (seal the source, move, release).
func Example() {
	ctx := context.Background()
	from := memory.New(memory.Options{Partitions: 2})
	to := memory.New(memory.Options{Partitions: 8})
	_ = from.Append(ctx,
		outbox.Entry{ID: "1", Topic: "orders", Key: "order-1", Payload: []byte("created")},
		outbox.Entry{ID: "2", Topic: "orders", Key: "order-1", Payload: []byte("paid")},
	)
	opts := move.Options{SourceName: "orders-v1"}

	// 1. Hold the destination; deploy its relays (they wait).
	if _, err := move.Prepare(ctx, from, to, opts); err != nil {
		panic(err)
	}
	// 2. The services now append to the destination.
	_ = to.Append(ctx, outbox.Entry{ID: "3", Topic: "orders", Key: "order-1", Payload: []byte("shipped")})

	// 3. Seal the source, move its entries, release the destination.
	res, err := move.Run(ctx, from, to, opts)
	if err != nil {
		panic(err)
	}
	fmt.Println("moved", res.Moved)

	// A straggler still appending to the source is refused.
	err = from.Append(ctx, outbox.Entry{Topic: "orders", Key: "order-2"})
	fmt.Println("sealed:", errors.Is(err, outbox.ErrSealed))

	st, _ := move.Inspect(ctx, from, to, opts)
	fmt.Println("complete:", st.Complete(), "destination:", st.Destination)
	// Output:
	// moved 2
	// sealed: true
	// complete: true destination: 3 entries (3 due, 0 waiting, 0 parked)
}
