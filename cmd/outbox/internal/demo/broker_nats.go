package demo

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	natssink "github.com/outboxrelay/outbox/sinks/nats"
)

// natsReady bounds the embedded server's start.
const natsReady = 10 * time.Second

// startNATS starts an embedded nats-server with JetStream (loopback, a
// random port, its store in a temporary directory removed by close) and a
// stream capturing the demo's topic as its subject, with the default
// duplicate window (2 minutes): a re-publish by a relay taking a
// partition over is dropped by the stream.
func startNATS(ctx context.Context) (*demoBroker, error) {
	dir, err := os.MkdirTemp("", "outbox-demo-nats-")
	if err != nil {
		return nil, fmt.Errorf("demo: a directory for the embedded NATS server's store: %w", err)
	}
	srv, err := server.NewServer(&server.Options{
		Host: "127.0.0.1", Port: server.RANDOM_PORT, JetStream: true, StoreDir: dir, NoLog: true, NoSigs: true,
	})
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("demo: the embedded NATS server: %w", err)
	}
	srv.Start()
	stopServer := func() {
		srv.Shutdown()
		srv.WaitForShutdown()
		_ = os.RemoveAll(dir)
	}
	if !srv.ReadyForConnections(natsReady) {
		stopServer()
		return nil, fmt.Errorf("demo: the embedded NATS server did not get ready within %v", natsReady)
	}
	nc, err := nats.Connect(srv.ClientURL(), nats.Name("outbox-demo-consumer"))
	if err != nil {
		stopServer()
		return nil, fmt.Errorf("demo: connecting to the embedded NATS server: %w", err)
	}
	b, err := natsStream(ctx, nc)
	if err == nil {
		b.sink, err = natssink.Dial(srv.ClientURL(), natssink.Options{})
	}
	if err != nil {
		nc.Close()
		stopServer()
		return nil, fmt.Errorf("demo: %w", err)
	}
	sink := b.sink.(*natssink.Sink)
	b.close = func() {
		_ = sink.Close()
		nc.Close()
		stopServer()
	}
	return b, nil
}

// natsStream creates the demo's stream on nc and returns the broker with
// its consumer: an ordered consumer of the stream from its start (it
// redelivers nothing and keeps the stream's order).
func natsStream(ctx context.Context, nc *nats.Conn) (*demoBroker, error) {
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	stream, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "OUTBOX_DEMO", Subjects: []string{demoTopic}, Storage: jetstream.FileStorage})
	if err != nil {
		return nil, fmt.Errorf("creating the stream on the embedded NATS server: %w", err)
	}
	cons, err := stream.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{})
	if err != nil {
		return nil, fmt.Errorf("creating the consumer: %w", err)
	}
	return &demoBroker{
		name: "embedded NATS JetStream (nats-server)", short: "NATS", fault: "nats: timeout",
		consume: func(ctx context.Context, arrive func(id, key string)) error {
			cc, err := cons.Consume(func(m jetstream.Msg) {
				arrive(m.Headers().Get(natssink.DefaultIDHeader), m.Headers().Get(natssink.DefaultKeyHeader))
			})
			if err != nil {
				return err
			}
			<-ctx.Done()
			cc.Stop()
			return nil
		},
	}, nil
}
