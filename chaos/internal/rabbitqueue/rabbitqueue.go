// Package rabbitqueue sets up the RabbitMQ exchange and queues a chaos
// scenario's relays publish to, and reads the queue back as
// [history.Delivery] values.
//
// # Topology
//
// [Setup] declares a durable fanout exchange and durable queues bound to
// it: every message the sink publishes to the exchange lands in each
// queue, whatever its routing key. One queue is the one checked: it is
// read once, at the end, in queue order. Another may be a [Tap]: a
// consumer the harness runs during the whole scenario, which only notes
// when each message arrived.
//
// # Deliveries
//
// A queue is one ordered log: every delivery is on partition 0 of the
// queue's name, its offset its position in the queue (0, 1, ...). Its entry
// ID is the message's message_id, else its outbox-id header (the RabbitMQ
// sink sets both); its key the outbox-key header, else the routing key.
// RabbitMQ keeps no arrival time of its own (3.10 has no message
// interceptors, and the timestamp property is in whole seconds): a
// delivery's At is the time a [Tap] saw the message arrive, see
// [Tap.Stamp].
package rabbitqueue

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/outboxrelay/outbox/chaos/history"
)

// Headers the RabbitMQ sink sets by default.
const (
	IDHeader  = "outbox-id"
	KeyHeader = "outbox-key"
)

// Setup declares the durable fanout exchange and the durable queues bound
// to it on the server at serverURL. It retries until ctx ends, so that it
// can be called while a node is still starting.
func Setup(ctx context.Context, serverURL, exchange string, queues ...string) error {
	return retry(ctx, serverURL, "declaring exchange "+exchange, func(ch *amqp.Channel) error {
		if err := ch.ExchangeDeclare(exchange, amqp.ExchangeFanout, true, false, false, false, nil); err != nil {
			return err
		}
		for _, q := range queues {
			if _, err := ch.QueueDeclare(q, true, false, false, false, amqp.Table{"x-queue-type": "classic"}); err != nil {
				return err
			}
			if err := ch.QueueBind(q, "", exchange, false, nil); err != nil {
				return err
			}
		}
		return nil
	})
}

// Delete deletes the exchange and the queues (a cleanup on a shared
// server).
func Delete(ctx context.Context, serverURL, exchange string, queues ...string) error {
	return withChannel(ctx, serverURL, func(ch *amqp.Channel) error {
		var errs []error
		for _, q := range queues {
			_, err := ch.QueueDelete(q, false, false, false)
			errs = append(errs, err)
		}
		errs = append(errs, ch.ExchangeDelete(exchange, false, false))
		return errors.Join(errs...)
	})
}

// Consume reads every message the queue holds as of the call, in queue
// order, and returns one Delivery per message. It acknowledges none of
// them: they stay in the queue, in their order, for a later call. It
// retries (a node just restarted may still be recovering the queue) until
// ctx ends. At is left zero; see [Tap.Stamp].
func Consume(ctx context.Context, serverURL, queue string) ([]history.Delivery, error) {
	var out []history.Delivery
	err := retry(ctx, serverURL, "reading queue "+queue, func(ch *amqp.Channel) error {
		var err error
		out, err = consume(ctx, ch, queue)
		return err
	})
	return out, err
}

func consume(ctx context.Context, ch *amqp.Channel, queue string) ([]history.Delivery, error) {
	q, err := ch.QueueDeclarePassive(queue, true, false, false, false, amqp.Table{"x-queue-type": "classic"})
	if err != nil {
		return nil, err
	}
	if q.Messages == 0 {
		return nil, nil
	}
	msgs, err := ch.ConsumeWithContext(ctx, queue, "", false, true, false, false, nil)
	if err != nil {
		return nil, err
	}
	out := make([]history.Delivery, 0, q.Messages)
	for len(out) < q.Messages {
		select {
		case m, ok := <-msgs:
			if !ok {
				return nil, fmt.Errorf("the channel closed after %d of %d messages", len(out), q.Messages)
			}
			out = append(out, delivery(queue, int64(len(out)), m))
		case <-ctx.Done():
			return nil, fmt.Errorf("%d of %d messages read: %w", len(out), q.Messages, ctx.Err())
		}
	}
	return out, nil
}

func delivery(queue string, offset int64, m amqp.Delivery) history.Delivery {
	id := m.MessageId
	if id == "" {
		id = header(m.Headers, IDHeader)
	}
	key := header(m.Headers, KeyHeader)
	if key == "" {
		key = m.RoutingKey
	}
	return history.Delivery{Topic: queue, Offset: offset, ID: id, Key: key}
}

func header(t amqp.Table, k string) string {
	switch v := t[k].(type) {
	case string:
		return v
	case []byte:
		return string(v)
	}
	return ""
}

// retry runs f on a channel of a fresh connection until it succeeds or
// ctx ends, a second apart.
func retry(ctx context.Context, serverURL, what string, f func(*amqp.Channel) error) error {
	for {
		last := withChannel(ctx, serverURL, f)
		if last == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("rabbitqueue: %s at %s: %w (last error: %v)", what, redacted(serverURL), ctx.Err(), last)
		case <-time.After(time.Second):
		}
	}
}

func withChannel(ctx context.Context, serverURL string, f func(*amqp.Channel) error) error {
	conn, err := dial(serverURL)
	if err != nil {
		return err
	}
	defer conn.Close()
	// A stuck server must not hold the call past ctx.
	stop := context.AfterFunc(ctx, func() { _ = conn.Close() })
	defer stop()
	ch, err := conn.Channel()
	if err != nil {
		return err
	}
	return f(ch)
}

func dial(serverURL string) (*amqp.Connection, error) {
	return amqp.DialConfig(serverURL, amqp.Config{Dial: amqp.DefaultDial(5 * time.Second), Heartbeat: 5 * time.Second})
}

func redacted(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		return "(a URL that does not parse)"
	}
	return u.Redacted()
}
