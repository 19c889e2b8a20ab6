package main

import (
	"context"
	"fmt"
	"os"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/outboxrelay/outbox"
	amqpsink "github.com/outboxrelay/outbox/sinks/amqp"
)

// RabbitMQ as a destination of the broker workloads: each run publishes
// into an exchange of its own ("obench.<tag>", fanout, durable) bound to a
// durable classic queue of its own ("obench.<tag>.q"), both deleted
// afterwards. Should a run die before, the queue expires after
// amqpQueueExpiry unused, and the exchange, auto-delete, goes with its
// binding.

const (
	// amqpRawWindow is how many publishes the raw client has awaiting
	// their confirms: past it, it waits for the oldest.
	amqpRawWindow = 4000
	// amqpQueueExpiry is the x-expires of a run's queue.
	amqpQueueExpiry = 30 * time.Minute
	// amqpPrefetch is the consumers' prefetch (basic.qos).
	amqpPrefetch = 2000
)

type amqpTarget struct {
	url  string
	conn *amqp.Connection // administration and the consumers
}

func dialAMQPTarget(_ context.Context, u string) (brokerTarget, error) {
	conn, err := amqp.DialConfig(u, amqp.Config{Properties: amqp.Table{"connection_name": "outbox-bench"}})
	if err != nil {
		return brokerTarget{}, err
	}
	t := &amqpTarget{url: u, conn: conn}
	return brokerTarget{
		name: "rabbitmq", key: "amqp", title: "RabbitMQ", server: "beam.smp",
		raw:   fmt.Sprintf("raw amqp091-go persistent mandatory publishes, publisher confirms (%d awaited at most)", amqpRawWindow),
		sink:  "amqpsink",
		open:  t.open,
		close: func() { conn.Close() },
	}, nil
}

type amqpDest struct {
	t        *amqpTarget
	exchange string
	queue    string
}

func (t *amqpTarget) open(_ context.Context) (destination, error) {
	tag := newDestTag()
	d := &amqpDest{t: t, exchange: "obench." + tag, queue: "obench." + tag + ".q"}
	ch, err := t.conn.Channel()
	if err != nil {
		return nil, err
	}
	defer ch.Close()
	if err := ch.ExchangeDeclare(d.exchange, amqp.ExchangeFanout, true, true, false, false, nil); err != nil {
		return nil, fmt.Errorf("declaring exchange %s: %w", d.exchange, err)
	}
	if _, err := ch.QueueDeclare(d.queue, true, false, false, false, amqp.Table{"x-expires": int32(amqpQueueExpiry / time.Millisecond)}); err != nil {
		return nil, fmt.Errorf("declaring queue %s: %w", d.queue, err)
	}
	if err := ch.QueueBind(d.queue, "", d.exchange, false, nil); err != nil {
		return nil, fmt.Errorf("binding queue %s: %w", d.queue, err)
	}
	return d, nil
}

func (d *amqpDest) topic() string { return d.exchange }

func (d *amqpDest) close() {
	ch, err := d.t.conn.Channel()
	if err != nil {
		fmt.Fprintf(os.Stderr, "cleanup: %s: %v\n", d.queue, err)
		return
	}
	defer ch.Close()
	// The exchange goes first: deleting it removes the binding, and an
	// auto-delete exchange would go by itself once the queue's went.
	if err := ch.ExchangeDelete(d.exchange, false, false); err != nil {
		fmt.Fprintf(os.Stderr, "cleanup: deleting exchange %s: %v\n", d.exchange, err)
		return
	}
	if _, err := ch.QueueDelete(d.queue, false, false, false); err != nil {
		fmt.Fprintf(os.Stderr, "cleanup: deleting queue %s: %v\n", d.queue, err)
	}
}

// rawPublish publishes every message from one goroutine on one channel in
// confirm mode (so each key's messages go out in order), persistent and
// mandatory, with the entry ID as message_id and the key as routing key,
// at most amqpRawWindow awaiting their confirms; a returned (unroutable)
// or nacked message fails it.
func (d *amqpDest) rawPublish(ctx context.Context, m *messages, ids []string, tr *tracker) error {
	conn, err := amqp.DialConfig(d.t.url, amqp.Config{Properties: amqp.Table{"connection_name": "outbox-bench-raw"}})
	if err != nil {
		return err
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		return err
	}
	if err := ch.Confirm(false); err != nil {
		return err
	}
	returns := ch.NotifyReturn(make(chan amqp.Return, 1))
	ctx, cancel := context.WithTimeout(ctx, drainTimeout(len(ids)))
	defer cancel()
	pending := make([]*amqp.DeferredConfirmation, len(ids))
	oldest := 0
	confirm := func() error {
		ok, err := pending[oldest].WaitContext(ctx)
		if err != nil {
			return fmt.Errorf("confirm of message %d: %w", oldest, err)
		}
		if !ok {
			return fmt.Errorf("message %d was nacked", oldest)
		}
		select {
		case r := <-returns:
			return fmt.Errorf("a message was returned: %d %s (exchange %q, routing key %q)", r.ReplyCode, r.ReplyText, r.Exchange, r.RoutingKey)
		default:
		}
		tr.markOrdered(m.keys[oldest], m.payload[oldest])
		pending[oldest] = nil
		oldest++
		return nil
	}
	for i := range ids {
		if i-oldest >= amqpRawWindow {
			if err := confirm(); err != nil {
				return err
			}
		}
		pending[i], err = ch.PublishWithDeferredConfirmWithContext(ctx, d.exchange, m.keys[i], true, false, amqpPublishing(ids[i], m.payload[i], time.Now()))
		if err != nil {
			return fmt.Errorf("publish %d: %w", i, err)
		}
	}
	for oldest < len(ids) {
		if err := confirm(); err != nil {
			return err
		}
	}
	return nil
}

// amqpPublishing is what the raw client publishes: what our sink
// publishes for an entry without headers of its own (the ID header, and
// the entry's creation time as the timestamp).
func amqpPublishing(id string, body []byte, at time.Time) amqp.Publishing {
	return amqp.Publishing{
		Headers:      amqp.Table{amqpsink.DefaultIDHeader: id},
		DeliveryMode: amqp.Persistent,
		MessageId:    id,
		Timestamp:    at,
		Body:         body,
	}
}

// held is the queue's message count (ready to be delivered).
func (d *amqpDest) held(context.Context) (int, error) {
	ch, err := d.t.conn.Channel()
	if err != nil {
		return 0, err
	}
	defer ch.Close()
	q, err := ch.QueueDeclarePassive(d.queue, true, false, false, false, amqp.Table{"x-expires": int32(amqpQueueExpiry / time.Millisecond)})
	return q.Messages, err
}

// consume marks every message delivered from the queue in tr
// (acknowledged automatically, prefetch amqpPrefetch).
func (d *amqpDest) consume(_ context.Context, m *messages, tr *tracker) (func(), error) {
	ch, err := d.t.conn.Channel()
	if err != nil {
		return nil, err
	}
	if err := ch.Qos(amqpPrefetch, 0, false); err != nil {
		ch.Close()
		return nil, err
	}
	deliveries, err := ch.Consume(d.queue, "", true, true, false, false, nil)
	if err != nil {
		ch.Close()
		return nil, err
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for dl := range deliveries {
			tr.markOrdered(keyFrom(m, dl.Body), dl.Body)
		}
	}()
	return func() { ch.Close(); <-done }, nil
}

// sink is our sink into the exchange, as amqpsink.Dial builds it (its
// default exchange mapping is the entry's topic, the routing key its key).
func (d *amqpDest) sink(context.Context) (outbox.Sink, func(), error) {
	s, err := amqpsink.Dial(d.t.url, amqpsink.Options{})
	if err != nil {
		return nil, nil, err
	}
	return s, func() { s.Close() }, nil
}
