package amqpsink_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/outboxrelay/outbox"
	"github.com/outboxrelay/outbox/internal/testenv"
	amqpsink "github.com/outboxrelay/outbox/sinks/amqp"
)

// brokerURL returns the shared server's URL, or skips (fails under
// OUTBOX_REQUIRE_SERVICES=1) when it does not answer.
func brokerURL(t testing.TB) string {
	t.Helper()
	url := testenv.AMQPURL()
	conn, err := amqp.Dial(url)
	if err != nil {
		testenv.Unavailable(t, "RabbitMQ", "OUTBOX_AMQP_URL", err)
	}
	_ = conn.Close()
	return url
}

// topo is a test's own exchange and queue on a broker, and a connection
// to inspect them.
type topo struct {
	t        testing.TB
	url      string
	conn     *amqp.Connection
	ch       *amqp.Channel
	exchange string
	queue    string
}

func uniq(prefix string) string {
	return prefix + "-" + strconv.FormatUint(rand.Uint64(), 36)
}

// newTopo declares a direct... topic exchange bound with "#" to a durable
// queue, both with random names, deleted at the end of the test.
func newTopo(t testing.TB, url string) *topo {
	t.Helper()
	conn, err := amqp.Dial(url)
	require.NoError(t, err)
	ch, err := conn.Channel()
	require.NoError(t, err)
	tp := &topo{t: t, url: url, conn: conn, ch: ch, exchange: uniq("ex"), queue: uniq("q")}
	require.NoError(t, ch.ExchangeDeclare(tp.exchange, "topic", true, false, false, false, nil))
	_, err = ch.QueueDeclare(tp.queue, true, false, false, false, nil)
	require.NoError(t, err)
	require.NoError(t, ch.QueueBind(tp.queue, "#", tp.exchange, false, nil))
	t.Cleanup(func() {
		if c, err := amqp.Dial(url); err == nil {
			if cc, err := c.Channel(); err == nil {
				_, _ = cc.QueueDelete(tp.queue, false, false, false)
				_ = cc.ExchangeDelete(tp.exchange, false, false)
			}
			_ = c.Close()
		}
		_ = conn.Close()
	})
	return tp
}

// read takes n messages off the queue, waiting for them up to a generous
// deadline.
func (tp *topo) read(n int) []amqp.Delivery {
	tp.t.Helper()
	var got []amqp.Delivery
	deadline := time.Now().Add(30 * time.Second)
	for len(got) < n && time.Now().Before(deadline) {
		d, ok, err := tp.ch.Get(tp.queue, true)
		require.NoError(tp.t, err)
		if !ok {
			time.Sleep(20 * time.Millisecond)
			continue
		}
		got = append(got, d)
	}
	require.Len(tp.t, got, n, "messages in queue %s", tp.queue)
	return got
}

// drain takes whatever the queue holds now.
func (tp *topo) drain() []amqp.Delivery {
	tp.t.Helper()
	var got []amqp.Delivery
	for {
		d, ok, err := tp.ch.Get(tp.queue, true)
		require.NoError(tp.t, err)
		if !ok {
			return got
		}
		got = append(got, d)
	}
}

// count is the number of messages ready in the queue.
func (tp *topo) count() int {
	tp.t.Helper()
	q, err := tp.ch.QueueDeclarePassive(tp.queue, true, false, false, false, nil)
	require.NoError(tp.t, err)
	return q.Messages
}

func dialSink(t testing.TB, url string, opts amqpsink.Options) *amqpsink.Sink {
	t.Helper()
	s, err := amqpsink.Dial(url, opts)
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func entries(topic string, n int, key func(i int) string) []outbox.Entry {
	es := make([]outbox.Entry, n)
	for i := range es {
		es[i] = outbox.Entry{ID: outbox.NewID(), Topic: topic, Key: key(i), Payload: fmt.Appendf(nil, "p%d", i)}
	}
	return es
}

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}
