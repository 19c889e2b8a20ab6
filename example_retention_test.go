package outbox_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/outboxrelay/outbox"
	"github.com/outboxrelay/outbox/backends/memory"
	"github.com/outboxrelay/outbox/backoff"
)

// ParkedRetention removes parked entries for good once they have been
// parked that long, on the relay that holds partition 0; here the sink
// refuses the entry for good, so it is parked at once and removed by the
// next retention round.
func ExampleRelayOptions_parkedRetention() {
	ctx := context.Background()
	backend := memory.New(memory.Options{})
	defer backend.Close()
	_ = backend.Append(ctx, outbox.Entry{ID: "order-1-created", Topic: "orders", Key: "order-1"})

	refuse := outbox.SinkFunc(func(context.Context, outbox.Entry) error {
		return backoff.Permanent(errors.New("schema rejected"))
	})
	relay, err := outbox.NewRelay(backend, refuse, outbox.RelayOptions{
		ParkedRetention:   time.Millisecond, // in production: days
		RetentionInterval: 10 * time.Millisecond,
		PollInterval:      10 * time.Millisecond,
		Logger:            slog.New(slog.DiscardHandler), // it logs each removal at WARN
	})
	if err != nil {
		panic(err)
	}
	if err := relay.Start(ctx); err != nil {
		panic(err)
	}
	for deadline := time.Now().Add(10 * time.Second); relay.Stats().ParkedRemoved == 0 && time.Now().Before(deadline); {
		time.Sleep(5 * time.Millisecond)
	}
	_ = relay.Stop(ctx)
	st := relay.Stats()
	fmt.Println("parked:", st.Parked, "removed:", st.ParkedRemoved)
	// Output: parked: 1 removed: 1
}

// A store that keeps no archive cannot honour ArchiveRetention: NewRelay
// names the option and the fix.
func ExampleNewRelay_archiveRetentionWithoutArchive() {
	backend := memory.New(memory.Options{})
	defer backend.Close()
	sink := outbox.SinkFunc(func(context.Context, outbox.Entry) error { return nil })
	_, err := outbox.NewRelay(backend, sink, outbox.RelayOptions{ArchiveRetention: 7 * 24 * time.Hour})
	var oe *outbox.OptionsError
	if errors.As(err, &oe) {
		fmt.Println(oe.Problems[0].Options)
	}
	// Output: [ArchiveRetention]
}
