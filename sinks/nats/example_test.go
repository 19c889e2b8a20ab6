package natssink_test

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/outboxrelay/outbox"
	"github.com/outboxrelay/outbox/backends/memory"
	natssink "github.com/outboxrelay/outbox/sinks/nats"
)

// Relay an outbox's entries to a JetStream stream, then read them back,
// dropping duplicates by Nats-Msg-Id. The server runs in process (an
// embedded nats-server with JetStream); give Dial your own server's URL
// instead. The outbox is the in-memory backend; a service uses pgoutbox or
// redisoutbox.
func Example() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dir, err := os.MkdirTemp("", "natssink-example-")
	if err != nil {
		fmt.Println("tempdir:", err)
		return
	}
	defer os.RemoveAll(dir)
	srv, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: dir, NoLog: true, NoSigs: true})
	if err != nil {
		fmt.Println("server:", err)
		return
	}
	srv.Start()
	defer srv.Shutdown()
	if !srv.ReadyForConnections(10 * time.Second) {
		fmt.Println("server not ready")
		return
	}

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
