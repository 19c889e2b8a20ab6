package amqpinbox_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"strconv"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/outboxrelay/outbox"
	"github.com/outboxrelay/outbox/inbox"
	"github.com/outboxrelay/outbox/internal/effectlog"
	amqpsink "github.com/outboxrelay/outbox/sinks/amqp"
	"github.com/outboxrelay/outbox/sinks/amqp/amqpinbox"
)

func dialSink(t testing.TB, url string) *amqpsink.Sink {
	t.Helper()
	s, err := amqpsink.Dial(url, amqpsink.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func TestMessageReadsTheSinksProperties(t *testing.T) {
	t.Parallel()
	tp := newTopo(t, nil)
	published := entry(tp.exchange, "customer-7", 3)
	require.NoError(t, dialSink(t, tp.url).Publish(ctxT(t), []outbox.Entry{published})[0])
	tp.publish("k", amqp.Publishing{Headers: amqp.Table{"outbox-id": "only-header", outbox.HeaderKeySeq: int32(5)}})
	tp.publish("k", amqp.Publishing{Headers: amqp.Table{"outbox-key-seq": "1"}})
	tp.publish("k", amqp.Publishing{MessageId: "bad-seq", Headers: amqp.Table{outbox.HeaderKeySeq: "0"}})

	var ds []amqp.Delivery
	deadline := time.Now().Add(time.Minute)
	for len(ds) < 4 && time.Now().Before(deadline) {
		d, ok, err := tp.ch.Get(tp.queue, true)
		require.NoError(t, err)
		if ok {
			ds = append(ds, d)
		}
	}
	require.Len(t, ds, 4)

	m, err := amqpinbox.Message(ds[0])
	require.NoError(t, err)
	assert.Equal(t, published.ID, m.ID)
	assert.Equal(t, "customer-7", m.Key)
	assert.Equal(t, int64(3), m.Seq)
	assert.Equal(t, published.Payload, m.Data.(amqp.Delivery).Body)

	m, err = amqpinbox.Message(ds[1])
	require.NoError(t, err)
	assert.Equal(t, "only-header", m.ID)
	assert.Equal(t, "k", m.Key)
	assert.Equal(t, int64(5), m.Seq, "an integer header is read too")

	_, err = amqpinbox.Message(ds[2])
	require.ErrorIs(t, err, inbox.ErrInvalidMessage)
	assert.Contains(t, err.Error(), "message_id")

	_, err = amqpinbox.Message(ds[3])
	require.ErrorIs(t, err, inbox.ErrInvalidMessage)
	assert.Contains(t, err.Error(), outbox.HeaderKeySeq)
}

func TestNewConsumerChecksItsArguments(t *testing.T) {
	t.Parallel()
	tp := newTopo(t, nil)
	ib := newInbox(t, inbox.Options{})
	h := newEffects().Handler(isDelivery, nil)
	for name, opts := range map[string]amqpinbox.Options{
		"NegativeMaxBatch":      {MaxBatch: -1},
		"NegativeRetryDelay":    {RetryDelay: -time.Second},
		"PrefetchBelowMaxBatch": {MaxBatch: 10, Prefetch: 5},
		"NegativeRetention":     {Retention: -time.Hour},
		"NegativeJanitorInt":    {Retention: time.Hour, JanitorInterval: -1},
	} {
		_, err := amqpinbox.NewConsumer(ib, h, tp.ch, tp.queue, opts)
		require.ErrorIs(t, err, inbox.ErrInvalidArgument, name)
	}
	_, err := amqpinbox.NewConsumer(ib, nil, tp.ch, tp.queue, amqpinbox.Options{})
	require.ErrorIs(t, err, inbox.ErrInvalidArgument)
	_, err = amqpinbox.NewConsumer(ib, h, tp.ch, tp.queue, amqpinbox.Options{MaxBatch: 10})
	require.NoError(t, err)
}

// The consumer commits, then its channel closes before the ack: Run
// returns an error, the broker requeues the delivery, and the next
// consumer skips it as a duplicate and acknowledges it. The effect stays
// applied once.
func TestLostAckIsRedeliveredAndSkippedAsDuplicate(t *testing.T) {
	t.Parallel()
	tp := newTopo(t, nil)
	ib := newInbox(t, inbox.Options{})
	tp.publish("k", amqp.Publishing{MessageId: "entry-1", Headers: amqp.Table{outbox.HeaderKeySeq: "1"}})

	_, ch1 := tp.channel()
	fx := newEffects()
	var (
		mu          sync.Mutex
		calls       = map[string]int{}
		redelivered bool
	)
	h := func(ctx context.Context, tx *inbox.MemoryTx, m inbox.Message) error {
		mu.Lock()
		calls[m.ID]++
		redelivered = redelivered || m.Data.(amqp.Delivery).Redelivered
		mu.Unlock()
		tx.OnCommit(func() {
			fx.Add(effect{ID: m.ID, Key: m.Key, Seq: m.Seq})
			if m.ID == "entry-1" {
				_ = ch1.Close() // the ack that follows the commit is lost
			}
		})
		return nil
	}
	c1, err := amqpinbox.NewConsumer(ib, h, ch1, tp.queue, amqpinbox.Options{})
	require.NoError(t, err)
	err = c1.Run(ctxT(t))
	require.Error(t, err, "Run goes on after its channel closed")
	assert.ErrorIs(t, err, amqp.ErrClosed)
	assert.Contains(t, err.Error(), "open a new channel")

	// A new channel: the requeued delivery is a duplicate; entry-2,
	// behind it, shows when it has been handled.
	_, ch2 := tp.channel()
	c2, err := amqpinbox.NewConsumer(ib, h, ch2, tp.queue, amqpinbox.Options{})
	require.NoError(t, err)
	stop, _ := runConsumer(t, c2)
	tp.publish("k", amqp.Publishing{MessageId: "entry-2", Headers: amqp.Table{outbox.HeaderKeySeq: "2"}})
	got := fx.Wait(t, 2)
	require.NoError(t, stop())
	assert.Equal(t, []effect{{ID: "entry-1", Key: "k", Seq: 1}, {ID: "entry-2", Key: "k", Seq: 2}}, got)
	assert.Equal(t, map[string]int{"entry-1": 1, "entry-2": 1}, calls, "the redelivery of entry-1 did not run the handler")
	assert.False(t, redelivered, "the handler saw no redelivery")
	assert.Zero(t, tp.ready(tp.queue), "everything acknowledged")
}

// A handler error fails its batch; Run tries it again in place
// (Attempts), then returns every unacknowledged delivery to the queue and
// consumes again: each message is applied once, on a classic and on a
// quorum queue; each key's in order on a classic queue, and on a quorum
// queue (which puts returned messages at its back) when the failures are
// retried in place.
func TestHandlerErrorRequeuesAndKeepsKeyOrder(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, queueType string
		attempts        int
		inOrder         bool
	}{
		{"ClassicRequeued", "classic", 1, true},
		{"QuorumRequeued", "quorum", 1, false},
		{"QuorumRetriedInPlace", "quorum", 2, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tp := newTopo(t, amqp.Table{"x-queue-type": tc.queueType})
			ib := newInbox(t, inbox.Options{})
			const keys, perKey = 4, 25
			var all []outbox.Entry
			for s := 1; s <= perKey; s++ {
				for k := range keys {
					all = append(all, entry(tp.exchange, "key-"+strconv.Itoa(k), s))
				}
			}
			for i, err := range dialSink(t, tp.url).Publish(ctxT(t), all) {
				require.NoError(t, err, "entry %d", i)
			}
			failOnce := map[string]bool{}
			for i := 3; i < len(all); i += 9 {
				failOnce[all[i].ID] = true
			}
			wantFailures := len(failOnce)
			var (
				mu          sync.Mutex
				failures    int
				redelivered int
			)
			fx := newEffects()
			h := fx.Handler(isDelivery, func(m inbox.Message) error {
				mu.Lock()
				defer mu.Unlock()
				if m.Data.(amqp.Delivery).Redelivered {
					redelivered++
				}
				if failOnce[m.ID] {
					delete(failOnce, m.ID)
					failures++
					return errors.New("the database is down")
				}
				return nil
			})
			_, ch := tp.channel()
			c, err := amqpinbox.NewConsumer(ib, h, ch, tp.queue, amqpinbox.Options{MaxBatch: 4, Prefetch: 16, Attempts: tc.attempts, RetryDelay: 10 * time.Millisecond})
			require.NoError(t, err)
			stop, _ := runConsumer(t, c)
			got := fx.Wait(t, len(all))
			require.NoError(t, stop())
			effectlog.CheckOnce(t, got, all, tc.inOrder)
			mu.Lock()
			defer mu.Unlock()
			assert.Equal(t, wantFailures, failures)
			if tc.attempts == 1 {
				assert.Positive(t, redelivered, "failed batches were returned and redelivered")
			} else {
				assert.Zero(t, redelivered, "failed batches were retried in place")
			}
			assert.Zero(t, tp.ready(tp.queue))
		})
	}
}

// Many keys, some messages in the queue twice (a relay's re-publish):
// each entry is applied once, each key's in order.
func TestManyKeysExactlyOnceInKeyOrder(t *testing.T) {
	t.Parallel()
	tp := newTopo(t, nil)
	ib := newInbox(t, inbox.Options{})
	const keys, perKey = 8, 40
	var all []outbox.Entry
	for s := 1; s <= perKey; s++ {
		for k := range keys {
			all = append(all, entry(tp.exchange, "key-"+strconv.Itoa(k), s))
		}
	}
	sink := dialSink(t, tp.url)
	copies := 0
	for i := 0; i < len(all); i += 40 {
		chunk := all[i : i+40]
		for j, err := range sink.Publish(ctxT(t), chunk) {
			require.NoError(t, err, "entry %d", i+j)
		}
		dup := chunk[:rand.IntN(6)]
		for j, err := range sink.Publish(ctxT(t), dup) {
			require.NoError(t, err, "copy %d", j)
		}
		copies += len(dup)
	}
	fx := newEffects()
	_, ch := tp.channel()
	c, err := amqpinbox.NewConsumer(ib, fx.Handler(isDelivery, nil), ch, tp.queue, amqpinbox.Options{MaxBatch: 16})
	require.NoError(t, err)
	start := time.Now()
	stop, _ := runConsumer(t, c)
	fx.Wait(t, len(all))
	// A sentinel behind the copies: when it is applied, every copy
	// before it was handled.
	tp.publish("sentinel", amqp.Publishing{MessageId: "sentinel"})
	got := fx.Wait(t, len(all)+1)
	require.NoError(t, stop())
	t.Logf("%d entries and %d copies consumed in %v", len(all), copies, time.Since(start))
	require.Equal(t, "sentinel", got[len(got)-1].ID)
	checkOnceInKeyOrder(t, got[:len(got)-1], all)
	assert.Zero(t, tp.ready(tp.queue), "everything acknowledged")
	// The stop's nack of "every outstanding delivery" (tag 0, none
	// left) did not close the channel: a round trip on it still works.
	_, err = ch.QueueDeclarePassive(tp.queue, true, false, false, false, nil)
	require.NoError(t, err, "the consumer's channel is still open after Run stopped")
}

// A delivery without an ID is rejected to the queue's dead-letter
// exchange; the ones after it are applied.
func TestDeliveryWithoutIDIsDeadLettered(t *testing.T) {
	t.Parallel()
	dlq := uniq("dlq")
	tp := newTopo(t, amqp.Table{"x-dead-letter-exchange": "", "x-dead-letter-routing-key": dlq})
	tp.declare(dlq, nil)
	tp.publish("k", amqp.Publishing{Body: []byte("no id")})
	tp.publish("k", amqp.Publishing{MessageId: "entry-2"})
	fx := newEffects()
	_, ch := tp.channel()
	c, err := amqpinbox.NewConsumer(memInbox(t), fx.Handler(isDelivery, nil), ch, tp.queue, amqpinbox.Options{})
	require.NoError(t, err)
	stop, _ := runConsumer(t, c)
	got := fx.Wait(t, 1)
	require.NoError(t, stop())
	assert.Equal(t, []effect{{ID: "entry-2", Key: "k"}}, got)
	d, ok, err := tp.ch.Get(dlq, true)
	require.NoError(t, err)
	require.True(t, ok, "the delivery without an ID is in the dead-letter queue")
	assert.Equal(t, "no id", string(d.Body))
	assert.Zero(t, tp.ready(tp.queue))
}

func memInbox(t testing.TB) *inbox.Inbox[*inbox.MemoryTx] { return newInbox(t, inbox.Options{}) }

// Run returns ErrCancelled when the broker cancels its consumer.
func TestRunEndsWhenTheQueueIsDeleted(t *testing.T) {
	t.Parallel()
	tp := newTopo(t, nil)
	fx := newEffects()
	_, ch := tp.channel()
	c, err := amqpinbox.NewConsumer(memInbox(t), fx.Handler(isDelivery, nil), ch, tp.queue, amqpinbox.Options{})
	require.NoError(t, err)
	stop, done := runConsumer(t, c)
	tp.publish("k", amqp.Publishing{MessageId: "entry-1"})
	fx.Wait(t, 1)
	_, err = tp.ch.QueueDelete(tp.queue, false, false, false)
	require.NoError(t, err)
	select {
	case <-done:
	case <-time.After(time.Minute):
		t.Fatal("Run did not return within a minute of its queue's deletion")
	}
	require.ErrorIs(t, stop(), amqpinbox.ErrCancelled)
}

// A message that always fails is returned to the queue until a quorum
// queue's delivery limit; the broker then dead-letters it, and the
// messages after it are applied.
func TestMessageThatAlwaysFailsIsDeadLetteredAtTheDeliveryLimit(t *testing.T) {
	t.Parallel()
	dlq := uniq("dlq")
	tp := newTopo(t, amqp.Table{
		"x-queue-type": "quorum", "x-delivery-limit": 2,
		"x-dead-letter-exchange": "", "x-dead-letter-routing-key": dlq,
	})
	tp.declare(dlq, nil)
	tp.publish("k", amqp.Publishing{MessageId: "poison", Body: []byte("poison")})
	tp.publish("k", amqp.Publishing{MessageId: "entry-2"})
	var (
		mu    sync.Mutex
		tries int
	)
	fx := newEffects()
	h := fx.Handler(isDelivery, func(m inbox.Message) error {
		if m.ID != "poison" {
			return nil
		}
		mu.Lock()
		defer mu.Unlock()
		tries++
		return errors.New("cannot apply this one")
	})
	_, ch := tp.channel()
	c, err := amqpinbox.NewConsumer(memInbox(t), h, ch, tp.queue, amqpinbox.Options{Prefetch: 1, Attempts: 1, RetryDelay: 10 * time.Millisecond})
	require.NoError(t, err)
	stop, _ := runConsumer(t, c)
	got := fx.Wait(t, 1)
	var dead amqp.Delivery
	deadline := time.Now().Add(time.Minute)
	for ok := false; !ok; {
		require.True(t, time.Now().Before(deadline), "the poison message reached no dead-letter queue within a minute")
		dead, ok, err = tp.ch.Get(dlq, true)
		require.NoError(t, err)
		if !ok {
			time.Sleep(20 * time.Millisecond)
		}
	}
	require.NoError(t, stop())
	assert.Equal(t, "poison", dead.MessageId)
	assert.Equal(t, []effect{{ID: "entry-2", Key: "k"}}, got)
	mu.Lock()
	defer mu.Unlock()
	t.Logf("the poison message was tried %d times before it was dead-lettered (x-delivery-limit 2)", tries)
	assert.GreaterOrEqual(t, tries, 2)
	assert.Zero(t, tp.ready(tp.queue))
}
