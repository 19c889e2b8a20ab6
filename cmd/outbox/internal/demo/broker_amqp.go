package demo

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/outboxrelay/outbox"
	"github.com/outboxrelay/outbox/cmd/outbox/internal/cli"
	amqpsink "github.com/outboxrelay/outbox/sinks/amqp"
)

// demoAMQPDefault is the RabbitMQ --sink amqp uses when neither
// --sink-url nor OUTBOX_AMQP_URL is set: a local broker's guest account
// (which RabbitMQ lets in from loopback only).
const demoAMQPDefault = "amqp://guest:guest@127.0.0.1:5672/"

// startAMQP connects to the RabbitMQ at c.SinkURL and makes an exchange
// and a queue of the run's own (a topic exchange named outbox-demo-...,
// its queue bound with "#"), deleted by close. The queue is not
// exclusive: the sink's channels and the consumer's are on different
// connections.
func startAMQP(_ context.Context, c *DemoCmd) (*demoBroker, error) {
	conn, err := amqp.Dial(c.SinkURL)
	if err != nil {
		return nil, fmt.Errorf("demo: connecting to RabbitMQ at %s (%s): %w; start the broker there, or pass --sink-url URL or set OUTBOX_AMQP_URL", redactedURL(c.SinkURL), c.sinkOrigin, cli.Redact(err, c.SinkURL))
	}
	ch, err := conn.Channel()
	if err != nil {
		_ = conn.Close()
		return nil, fmt.Errorf("demo: a channel to RabbitMQ: %w", err)
	}
	name := fmt.Sprintf("outbox-demo-%d-%04x", time.Now().UnixNano(), rand.Uint32N(1<<16))
	cleanup := func() {
		if dc, err := conn.Channel(); err == nil {
			_, _ = dc.QueueDelete(name, false, false, false)
			_ = dc.ExchangeDelete(name, false, false)
		}
		_ = conn.Close()
	}
	err = errors.Join(
		ch.ExchangeDeclare(name, "topic", false, false, false, false, nil),
		func() error { _, err := ch.QueueDeclare(name, false, false, false, false, nil); return err }(),
		ch.QueueBind(name, "#", name, false, nil),
	)
	if err != nil {
		cleanup()
		return nil, fmt.Errorf("demo: declaring the exchange and queue %s on RabbitMQ: %w", name, err)
	}
	deliveries, err := ch.Consume(name, "outbox-demo", true, false, false, false, nil)
	if err != nil {
		cleanup()
		return nil, fmt.Errorf("demo: consuming the queue %s: %w", name, err)
	}
	sink, err := amqpsink.Dial(c.SinkURL, amqpsink.Options{Exchange: func(outbox.Entry) string { return name }})
	if err != nil {
		cleanup()
		return nil, fmt.Errorf("demo: %w", cli.Redact(err, c.SinkURL))
	}
	return &demoBroker{
		name: "RabbitMQ at " + redactedURL(c.SinkURL) + ", exchange " + name, short: "RabbitMQ", sink: sink, fault: "connection closed",
		consume: func(ctx context.Context, arrive func(id, key string)) error {
			for {
				select {
				case <-ctx.Done():
					return nil
				case d, ok := <-deliveries:
					if !ok {
						return errors.New("RabbitMQ closed the consumer's channel")
					}
					arrive(d.MessageId, d.RoutingKey)
				}
			}
		},
		close: func() {
			_ = sink.Close()
			cleanup()
		},
	}, nil
}

// redactedURL is raw without its password.
func redactedURL(raw string) string { return cli.RedactText(raw) }
