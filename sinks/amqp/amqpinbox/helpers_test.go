package amqpinbox_test

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/outboxrelay/outbox"
	"github.com/outboxrelay/outbox/inbox"
	"github.com/outboxrelay/outbox/internal/effectlog"
	"github.com/outboxrelay/outbox/internal/testenv"
	"github.com/outboxrelay/outbox/sinks/amqp/amqpinbox"
)

func TestMain(m *testing.M) {
	flag.Parse()
	examplesNeedRabbitMQ()
	os.Exit(m.Run())
}

// examplesNeedRabbitMQ makes the Examples runnable or leaves them out:
// they consume from a real RabbitMQ and an Example cannot skip itself.
// When the server answers, the Examples read its URL from OUTBOX_AMQP_URL
// (set here); when it does not and OUTBOX_REQUIRE_SERVICES is not 1, they
// are left out through -test.skip, said on stderr.
func examplesNeedRabbitMQ() {
	url := testenv.AMQPURL()
	conn, err := amqp.Dial(url)
	if err == nil {
		_ = conn.Close()
		_ = os.Setenv("OUTBOX_AMQP_URL", url)
		return
	}
	if !testenv.Required() {
		testenv.SkipExamples("amqpinbox", "RabbitMQ", "no server answers ("+err.Error()+"); set OUTBOX_AMQP_URL or run ./scripts/services.sh start")
	}
}

// brokerURL is the real RabbitMQ's URL, or skips the test (fails it under
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

func uniq(prefix string) string {
	return prefix + "-" + strconv.FormatUint(rand.Uint64(), 36)
}

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// topo is a test's own topic exchange bound with "#" to a durable queue,
// both deleted when the test ends, and a connection and channel to
// publish and inspect with.
type topo struct {
	t        testing.TB
	url      string
	conn     *amqp.Connection
	ch       *amqp.Channel
	exchange string
	queue    string
}

// newTopo declares the test's exchange and queue; args are the queue's
// arguments (x-queue-type, dead-lettering).
func newTopo(t testing.TB, args amqp.Table) *topo {
	t.Helper()
	url := brokerURL(t)
	tp := &topo{t: t, url: url, exchange: uniq("ex"), queue: uniq("q")}
	tp.conn, tp.ch = tp.channel()
	require.NoError(t, tp.ch.ExchangeDeclare(tp.exchange, "topic", true, false, false, false, nil))
	tp.declare(tp.queue, args)
	require.NoError(t, tp.ch.QueueBind(tp.queue, "#", tp.exchange, false, nil))
	t.Cleanup(func() { _ = tp.ch.ExchangeDelete(tp.exchange, false, false) })
	return tp
}

// declare declares a durable queue, deleted when the test ends.
func (tp *topo) declare(name string, args amqp.Table) {
	tp.t.Helper()
	_, err := tp.ch.QueueDeclare(name, true, false, false, false, args)
	require.NoError(tp.t, err)
	tp.t.Cleanup(func() {
		if c, err := amqp.Dial(tp.url); err == nil {
			if cc, err := c.Channel(); err == nil {
				_, _ = cc.QueueDelete(name, false, false, false)
			}
			_ = c.Close()
		}
	})
}

// channel opens a connection of its own and a channel on it, closed when
// the test ends.
func (tp *topo) channel() (*amqp.Connection, *amqp.Channel) {
	tp.t.Helper()
	conn, err := amqp.Dial(tp.url)
	require.NoError(tp.t, err)
	tp.t.Cleanup(func() { _ = conn.Close() })
	ch, err := conn.Channel()
	require.NoError(tp.t, err)
	return conn, ch
}

// publish publishes one persistent message to the exchange.
func (tp *topo) publish(routingKey string, p amqp.Publishing) {
	tp.t.Helper()
	p.DeliveryMode = amqp.Persistent
	require.NoError(tp.t, tp.ch.PublishWithContext(ctxT(tp.t), tp.exchange, routingKey, true, false, p))
}

// ready is the number of messages ready in queue.
func (tp *topo) ready(queue string) int {
	tp.t.Helper()
	q, err := tp.ch.QueueDeclarePassive(queue, true, false, false, false, nil)
	require.NoError(tp.t, err)
	return q.Messages
}

// The committed effects and their checks are effectlog's.
type (
	effect  = effectlog.Effect
	effects = effectlog.Log
)

var newEffects = effectlog.New

// isDelivery: the helper hands the handler the amqp.Delivery.
func isDelivery(d any) bool { _, ok := d.(amqp.Delivery); return ok }

// runConsumer runs c in the background; stop ends it and returns Run's
// result, and done closes when Run returns by itself (then stop returns
// its result at once).
func runConsumer[Tx any](t testing.TB, c *amqpinbox.Consumer[Tx]) (stop func() error, done <-chan struct{}) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	ended := make(chan struct{})
	var err error
	go func() {
		err = c.Run(ctx)
		close(ended)
	}()
	stop = func() error {
		cancel()
		select {
		case <-ended:
			return err
		case <-time.After(time.Minute):
			return fmt.Errorf("Run did not return within a minute of its context's end")
		}
	}
	t.Cleanup(func() { _ = stop() })
	return stop, ended
}

func newInbox(t testing.TB, opts inbox.Options) *inbox.Inbox[*inbox.MemoryTx] {
	t.Helper()
	ib, err := inbox.New(inbox.NewMemory(), opts)
	require.NoError(t, err)
	return ib
}

// entry is an outbox entry of key with its per-key sequence number.
func entry(topic, key string, seq int) outbox.Entry {
	return outbox.Entry{
		ID: outbox.NewID(), Topic: topic, Key: key, Payload: []byte("p" + strconv.Itoa(seq)),
		Headers: map[string]string{outbox.HeaderKeySeq: strconv.Itoa(seq)},
	}
}

// checkOnceInKeyOrder fails the test unless got holds each of want's
// entries once, each key's in sequence order 1, 2, 3, ...
func checkOnceInKeyOrder(t testing.TB, got []effect, want []outbox.Entry) {
	t.Helper()
	effectlog.CheckOnce(t, got, want, true)
}
