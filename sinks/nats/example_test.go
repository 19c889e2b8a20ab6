package natssink_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/outboxrelay/outbox"
	"github.com/outboxrelay/outbox/backends/memory"
	"github.com/outboxrelay/outbox/backoff"
	natssink "github.com/outboxrelay/outbox/sinks/nats"
)

// embedded starts an in-process nats-server with JetStream for the
// examples, and returns it with a function that stops it and removes its
// store.
func embedded() (*server.Server, func(), error) {
	dir, err := os.MkdirTemp("", "natssink-example-")
	if err != nil {
		return nil, nil, err
	}
	srv, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: dir, NoLog: true, NoSigs: true})
	if err != nil {
		os.RemoveAll(dir)
		return nil, nil, err
	}
	srv.Start()
	stop := func() { srv.Shutdown(); srv.WaitForShutdown(); os.RemoveAll(dir) }
	if !srv.ReadyForConnections(10 * time.Second) {
		stop()
		return nil, nil, fmt.Errorf("server not ready")
	}
	return srv, stop, nil
}

// Relay an outbox's entries to a JetStream stream, then read them back,
// dropping duplicates by Nats-Msg-Id. The server runs in process (an
// embedded nats-server with JetStream); give Dial your own server's URL
// instead. The outbox is the in-memory backend; a service uses pgoutbox or
// redisoutbox.
func Example() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	srv, stop, err := embedded()
	if err != nil {
		fmt.Println("server:", err)
		return
	}
	defer stop()

	// The stream: its subjects capture the entries' topics, and its
	// duplicate window outlasts any re-publish of an entry (docs/nats.md).
	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		fmt.Println("connect:", err)
		return
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		fmt.Println("jetstream:", err)
		return
	}
	stream, err := js.CreateStream(ctx, jetstream.StreamConfig{
		Name: "ORDERS", Subjects: []string{"orders.>"},
		Storage: jetstream.FileStorage, Duplicates: 10 * time.Minute,
	})
	if err != nil {
		fmt.Println("stream:", err)
		return
	}

	sink, err := natssink.Dial(srv.ClientURL(), natssink.Options{})
	if err != nil {
		fmt.Println("dial:", err)
		return
	}
	defer sink.Close()

	b := memory.New(memory.Options{Partitions: 4})
	defer b.Close()
	tx := b.Begin()
	err = b.AppendInTx(ctx, tx,
		outbox.Entry{ID: "order-1-created", Topic: "orders.created", Key: "order-1", Payload: []byte(`{"status":"created"}`)},
		outbox.Entry{ID: "order-1-paid", Topic: "orders.paid", Key: "order-1", Payload: []byte(`{"status":"paid"}`)},
		outbox.Entry{ID: "order-1-shipped", Topic: "orders.shipped", Key: "order-1", Payload: []byte(`{"status":"shipped"}`)},
	)
	if err != nil {
		fmt.Println("append:", err)
		return
	}
	if err := tx.Commit(); err != nil {
		fmt.Println("commit:", err)
		return
	}
	relay, err := outbox.NewRelay(b, sink, outbox.RelayOptions{})
	if err != nil {
		fmt.Println("relay:", err)
		return
	}
	if err := relay.Start(ctx); err != nil {
		fmt.Println("start:", err)
		return
	}
	defer func() { _ = relay.Stop(context.Background()) }()

	// A consumer: an ordered consumer reads the stream in order; the
	// Nats-Msg-Id header (the entry ID) lets it drop duplicates.
	cons, err := stream.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{})
	if err != nil {
		fmt.Println("consumer:", err)
		return
	}
	seen := map[string]bool{}
	for n := 0; n < 3; {
		msg, err := cons.Next(jetstream.FetchMaxWait(5 * time.Second))
		if err != nil {
			fmt.Println("next:", err)
			return
		}
		id := msg.Headers().Get(jetstream.MsgIDHeader)
		if seen[id] {
			continue
		}
		seen[id] = true
		n++
		fmt.Println(msg.Subject(), msg.Headers().Get(natssink.DefaultKeyHeader), id, string(msg.Data()))
	}
	// Output:
	// orders.created order-1 order-1-created {"status":"created"}
	// orders.paid order-1 order-1-paid {"status":"paid"}
	// orders.shipped order-1 order-1-shipped {"status":"shipped"}
}

// Publish directly, and read each entry's outcome: an entry whose subject
// no stream captures fails permanently (the relay would park it), with a
// reason that says what to configure.
func ExampleSink_Publish() {
	srv, stop, err := embedded()
	if err != nil {
		fmt.Println("server:", err)
		return
	}
	defer stop()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		fmt.Println("connect:", err)
		return
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "ORDERS", Subjects: []string{"orders"}, Duplicates: 10 * time.Minute}); err != nil {
		fmt.Println("stream:", err)
		return
	}

	sink, err := natssink.Dial(srv.ClientURL(), natssink.Options{})
	if err != nil {
		fmt.Println("dial:", err)
		return
	}
	defer sink.Close()
	errs := sink.Publish(ctx, []outbox.Entry{
		{ID: "o-1", Topic: "orders", Key: "order-1", Payload: []byte("created")},
		{ID: "o-1", Topic: "orders", Key: "order-1", Payload: []byte("created")}, // again: a duplicate the stream drops
		{ID: "i-1", Topic: "invoices", Key: "order-1", Payload: []byte("issued")},
	})
	for i, err := range errs {
		if err == nil {
			fmt.Println(i, "published")
			continue
		}
		fmt.Println(i, backoff.ClassOf(err), errors.Is(err, natssink.ErrNoStream))
	}
	info, _ := js.Stream(ctx, "ORDERS")
	st, _ := info.Info(ctx)
	fmt.Println("stored:", st.State.Msgs)
	// Output:
	// 0 published
	// 1 published
	// 2 permanent true
	// stored: 1
}

// New takes a connection of your own: build it with
// nats.ReconnectBufSize(-1) and a FlusherTimeout, or nothing bounds how
// late a message can still be stored (see the package documentation,
// "Deadlines").
func ExampleNew() {
	srv, stop, err := embedded()
	if err != nil {
		fmt.Println("server:", err)
		return
	}
	defer stop()
	nc, err := nats.Connect(srv.ClientURL(), nats.ReconnectBufSize(-1), nats.FlusherTimeout(3*time.Second))
	if err != nil {
		fmt.Println("connect:", err)
		return
	}
	defer nc.Close()
	sink, err := natssink.New(nc, natssink.Options{PublishTimeout: 2 * time.Second})
	if err != nil {
		fmt.Println("new:", err)
		return
	}
	defer sink.Close() // nc stays open
	fmt.Println("landing bound:", sink.LandingBound())

	buffering, _ := nats.Connect(srv.ClientURL()) // nats.go's defaults
	defer buffering.Close()
	unbounded, _ := natssink.New(buffering, natssink.Options{})
	defer unbounded.Close()
	fmt.Println("with nats.go's defaults:", unbounded.LandingBound() == natssink.LandingUnbounded)
	// Output:
	// landing bound: 5s
	// with nats.go's defaults: true
}
