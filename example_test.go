package outbox_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/outboxrelay/outbox"
	"github.com/outboxrelay/outbox/backends/memory"
	"github.com/outboxrelay/outbox/backoff"
)

// The whole flow: append entries in a transaction, run a relay, receive
// them in per-key order.
func Example() {
	ctx := context.Background()
	backend := memory.New(memory.Options{Partitions: 4})

	// In a service, this is the transaction that also writes the business
	// change (a pgx.Tx or a go-redis TxPipeline with the real backends).
	tx := backend.Begin()
	err := backend.AppendInTx(ctx, tx,
		outbox.Entry{Topic: "orders", Key: "order-1", Payload: []byte(`{"status":"created"}`)},
		outbox.Entry{Topic: "orders", Key: "order-1", Payload: []byte(`{"status":"paid"}`)},
		outbox.Entry{Topic: "orders", Key: "order-1", Payload: []byte(`{"status":"shipped"}`)},
	)
	if err != nil {
		panic(err)
	}
	if err := tx.Commit(); err != nil {
		panic(err)
	}

	published := make(chan outbox.Entry)
	relay, err := outbox.NewRelay(backend, outbox.ChannelSink(published), outbox.RelayOptions{})
	if err != nil {
		panic(err)
	}
	if err := relay.Start(ctx); err != nil {
		panic(err)
	}
	defer relay.Stop(ctx)

	for range 3 {
		e := <-published
		fmt.Printf("%s %s %s\n", e.Topic, e.Key, e.Payload)
	}
	// Output:
	// orders order-1 {"status":"created"}
	// orders order-1 {"status":"paid"}
	// orders order-1 {"status":"shipped"}
}

// A sink classifies its errors: a permanent one parks the entry at once,
// anything else is retried with backoff.
func ExampleSinkFunc() {
	ctx := context.Background()
	backend := memory.New(memory.Options{})
	_ = backend.Append(ctx,
		outbox.Entry{ID: "ok", Topic: "orders", Key: "a"},
		outbox.Entry{ID: "too-big", Topic: "orders", Key: "b"},
	)

	done := make(chan string, 2)
	sink := outbox.SinkFunc(func(ctx context.Context, e outbox.Entry) error {
		if e.ID == "too-big" {
			done <- "parked " + e.ID
			return backoff.Permanent(errors.New("message too large"))
		}
		done <- "sent " + e.ID
		return nil
	})
	relay, _ := outbox.NewRelay(backend, sink, outbox.RelayOptions{PollInterval: 10 * time.Millisecond})
	_ = relay.Start(ctx)
	got := map[string]bool{<-done: true, <-done: true}
	_ = relay.Stop(ctx)

	parked, _ := backend.Parked(ctx, "", 10)
	fmt.Println(got["sent ok"], got["parked too-big"])
	fmt.Println(parked[0].ID, parked[0].LastError)
	// Output:
	// true true
	// too-big message too large
}

// A front end checks its settings before it opens a store and reports the
// problems with its own flag names.
func ExampleRelayOptions_Validate() {
	opts := outbox.RelayOptions{LeaseTTL: 3 * time.Second, RenewMargin: 5 * time.Second}
	err := opts.Validate(nil) // the sink is not made yet
	fmt.Println(err)

	var oe *outbox.OptionsError
	if errors.As(err, &oe) {
		flags := map[string]string{"LeaseTTL": "--lease-ttl", "RenewMargin": "--renew-margin"}
		fmt.Println("relay:", oe.Describe(func(option string) string { return flags[option] }))
	}
	// Output:
	// outbox: RelayOptions.RenewMargin (5s) must be below LeaseTTL (3s)
	// relay: --renew-margin (5s) must be below --lease-ttl (3s)
}
