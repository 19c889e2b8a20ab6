package inbox_test

import (
	"context"
	"fmt"

	"github.com/outboxrelay/outbox/inbox"
)

// A consumer applies each message once, though the broker delivers one of
// them twice.
func Example() {
	ctx := context.Background()
	store := inbox.NewMemory()
	ib, err := inbox.New(store, inbox.Options{})
	if err != nil {
		panic(err)
	}
	balance := 0
	credit := func(ctx context.Context, tx *inbox.MemoryTx, m inbox.Message) error {
		tx.OnCommit(func() { balance += 10 }) // the effect commits with the record
		return nil
	}
	for _, id := range []string{"entry-1", "entry-2", "entry-1"} {
		r, err := ib.Handle(ctx, inbox.Message{ID: id}, credit)
		if err != nil {
			panic(err) // do not acknowledge: the broker delivers it again
		}
		fmt.Println(id, r.Outcome)
	}
	fmt.Println("balance", balance)
	// Output:
	// entry-1 applied
	// entry-2 applied
	// entry-1 duplicate
	// balance 20
}
