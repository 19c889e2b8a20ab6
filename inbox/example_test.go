package inbox_test

import (
	"context"
	"fmt"
	"time"

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

// The inbox's janitor removes the records older than the retention, and
// OldestReporter tells the age of the oldest record left.
func ExampleInbox_RunJanitor() {
	store := inbox.NewMemory()
	ib, err := inbox.New(store, inbox.Options{})
	if err != nil {
		panic(err)
	}
	apply := func(ctx context.Context, tx *inbox.MemoryTx, m inbox.Message) error { return nil }
	for _, id := range []string{"last-month", "yesterday"} {
		if _, err := ib.Handle(context.Background(), inbox.Message{ID: id}, apply); err != nil {
			panic(err)
		}
	}
	store.Backdate(30*24*time.Hour, []string{"last-month"}, nil) // as if applied 30 days ago
	store.Backdate(24*time.Hour, []string{"yesterday"}, nil)

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- ib.RunJanitor(ctx, inbox.JanitorOptions{Retention: 14 * 24 * time.Hour}) }()
	for {
		oldest, _, _ := store.Oldest(context.Background())
		if age := time.Since(oldest); age < 14*24*time.Hour {
			fmt.Println("oldest record left is", age.Round(time.Hour), "old")
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	fmt.Println("janitor returned", <-done)
	// Output:
	// oldest record left is 24h0m0s old
	// janitor returned <nil>
}
