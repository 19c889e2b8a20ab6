package amqpsink_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/outboxrelay/outbox"
	"github.com/outboxrelay/outbox/conformance/sinksuite"
	amqpsink "github.com/outboxrelay/outbox/sinks/amqp"
)

// TestSinkSuite runs the public sink conformance suite against the
// RabbitMQ sink and the test binary's private node (whose small
// max_message_size makes the too-large fault cheap). Each case gets its
// own exchanges and durable queue; the sink connects through a fault
// proxy of its own, which cuts or stalls its connection.
func TestSinkSuite(t *testing.T) {
	sinksuite.Run(t, newSuiteHarness)
}

// The suite's sinks use short timeouts, so that the LandingBound case
// waits 0.5s + 2 x 1s + 1s = 3.5s rather than the default 9s.
const (
	suitePublishTimeout = 3 * time.Second
	suiteCloseTimeout   = 500 * time.Millisecond
)

type suiteHarness struct {
	n        *privNode
	proxy    *faultProxy
	sink     *amqpsink.Sink
	exchange string // bound to queue with "#"
	lonely   string // bound to nothing: unroutable
	missing  string // never declared
	queue    string

	mu     sync.Mutex
	broken map[string]string // entry ID -> the exchange a fault sends it to
	msgs   []sinksuite.Message
	marks  map[string]bool // barrier markers seen
	grew   chan struct{}   // closed and replaced when msgs or marks grow

	ch *amqp.Channel // of the reader's connection
}

func newSuiteHarness(t *testing.T, cfg sinksuite.Config) sinksuite.Harness {
	n := privateNode(t)
	h := &suiteHarness{
		n: n, exchange: uniq("suite"), lonely: uniq("lonely"), missing: uniq("missing"), queue: uniq("suite-q"),
		broken: map[string]string{}, marks: map[string]bool{}, grew: make(chan struct{}),
	}
	conn, err := amqp.Dial(n.URL())
	if err != nil {
		t.Fatalf("reader connection: %v", err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	if h.ch, err = conn.Channel(); err != nil {
		t.Fatal(err)
	}
	must := func(err error) {
		if err != nil {
			t.Fatal(err)
		}
	}
	must(h.ch.ExchangeDeclare(h.exchange, "topic", true, true, false, false, nil))
	must(h.ch.ExchangeDeclare(h.lonely, "direct", false, true, false, false, nil))
	_, err = h.ch.QueueDeclare(h.queue, true, false, false, false, nil)
	must(err)
	must(h.ch.QueueBind(h.queue, "#", h.exchange, false, nil))
	must(h.ch.Confirm(false))
	t.Cleanup(func() {
		if c, err := amqp.Dial(n.URL()); err == nil {
			if cc, err := c.Channel(); err == nil {
				_, _ = cc.QueueDelete(h.queue, false, false, false)
			}
			_ = c.Close()
		}
	})
	deliveries, err := h.ch.Consume(h.queue, "", true, true, false, false, nil)
	must(err)
	go h.consume(deliveries)

	h.proxy = proxyTo(t, n.URL())
	h.sink, err = amqpsink.Dial("amqp://guest:guest@"+h.proxy.addr()+"/?heartbeat=1", amqpsink.Options{
		Exchange: func(e outbox.Entry) string {
			h.mu.Lock()
			defer h.mu.Unlock()
			if x, ok := h.broken[e.ID]; ok {
				return x
			}
			return h.exchange
		},
		PublishTimeout: suitePublishTimeout,
		CloseTimeout:   suiteCloseTimeout,
		ReconnectDelay: 20 * time.Millisecond,
	})
	if err != nil {
		t.Fatalf("amqpsink.Dial: %v", err)
	}
	t.Cleanup(func() { _ = h.sink.Close() })
	return h
}

func (h *suiteHarness) Sink() outbox.Sink { return h.sink }

// consume keeps every message of the queue, in the order the queue
// delivers them (one consumer: the queue's order).
func (h *suiteHarness) consume(ds <-chan amqp.Delivery) {
	for d := range ds {
		h.mu.Lock()
		if mark, ok := d.Headers["suite-barrier"].(string); ok {
			h.marks[mark] = true
		} else {
			m := sinksuite.Message{ID: d.MessageId, Key: d.RoutingKey, Payload: d.Body, Headers: map[string]string{}}
			for k, v := range d.Headers {
				m.Headers[k] = fmt.Sprint(v)
			}
			h.msgs = append(h.msgs, m)
		}
		close(h.grew)
		h.grew = make(chan struct{})
		h.mu.Unlock()
	}
}

// Read publishes a marker to the queue and waits until the consumer has
// it: every message enqueued before was delivered before it. Then it
// waits for n messages or ctx.
func (h *suiteHarness) Read(ctx context.Context, n int) ([]sinksuite.Message, error) {
	mark := uniq("mark")
	dc, err := h.ch.PublishWithDeferredConfirm("", h.queue, true, false, amqp.Publishing{Headers: amqp.Table{"suite-barrier": mark}})
	if err != nil {
		return nil, fmt.Errorf("barrier: %w", err)
	}
	if _, err := dc.WaitContext(ctx); err != nil {
		return h.snapshot(), nil
	}
	for {
		h.mu.Lock()
		ready := h.marks[mark] && len(h.msgs) >= n
		msgs, grew := append([]sinksuite.Message(nil), h.msgs...), h.grew
		h.mu.Unlock()
		if ready {
			return msgs, nil
		}
		select {
		case <-grew:
		case <-ctx.Done():
			return msgs, nil
		}
	}
}

func (h *suiteHarness) snapshot() []sinksuite.Message {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]sinksuite.Message(nil), h.msgs...)
}

// breakEntry sends the entry's message to exchange until heal.
func (h *suiteHarness) breakEntry(id, exchange string) func(context.Context) error {
	h.mu.Lock()
	h.broken[id] = exchange
	h.mu.Unlock()
	return func(context.Context) error {
		h.mu.Lock()
		delete(h.broken, id)
		h.mu.Unlock()
		return nil
	}
}

func (h *suiteHarness) Faults() []sinksuite.Fault {
	healProxy := func(context.Context) error { h.proxy.heal(); return nil }
	return []sinksuite.Fault{
		{
			Name: "NoExchange", PerEntry: true, Permanent: true,
			Mentions: []string{"does not exist", "declare it", "Options.Exchange"},
			Apply: func(_ context.Context, e *outbox.Entry) (func(context.Context) error, error) {
				return h.breakEntry(e.ID, h.missing), nil
			},
		},
		{
			Name: "Unroutable", PerEntry: true, Permanent: true,
			Mentions: []string{"bind a queue", "alternate exchange"},
			Apply: func(_ context.Context, e *outbox.Entry) (func(context.Context) error, error) {
				return h.breakEntry(e.ID, h.lonely), nil
			},
		},
		{
			Name: "TooLarge", PerEntry: true, Permanent: true,
			Mentions: []string{"max_message_size"},
			Apply: func(_ context.Context, e *outbox.Entry) (func(context.Context) error, error) {
				e.Payload = make([]byte, nodeMaxMessageSize+1)
				return func(context.Context) error { return nil }, nil
			},
		},
		{
			Name: "ConnectionCut",
			Apply: func(context.Context, *outbox.Entry) (func(context.Context) error, error) {
				h.proxy.refuse()
				return healProxy, nil
			},
		},
		{
			Name: "BrokerStalled", Stalls: true,
			Apply: func(context.Context, *outbox.Entry) (func(context.Context) error, error) {
				h.proxy.stall()
				return healProxy, nil
			},
		},
	}
}
