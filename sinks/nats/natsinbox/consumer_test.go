package natsinbox_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/outboxrelay/outbox"
	"github.com/outboxrelay/outbox/inbox"
	natssink "github.com/outboxrelay/outbox/sinks/nats"
	"github.com/outboxrelay/outbox/sinks/nats/natsinbox"
)

func newInbox(t testing.TB, opts inbox.Options) *inbox.Inbox[*inbox.MemoryTx] {
	t.Helper()
	ib, err := inbox.New(inbox.NewMemory(), opts)
	require.NoError(t, err)
	return ib
}

func TestMessageReadsTheSinksHeaders(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	sink, err := natssink.Dial(e.url, natssink.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = sink.Close() })
	published := entry(e.subject+".orders", "customer-7", 3)
	require.NoError(t, sink.Publish(ctxT(t), []outbox.Entry{published})[0])
	e.publish(nats.MsgIdHdr, "only-msg-id")
	e.publish("outbox-key", "k")
	e.publish("outbox-id", "bad-seq", outbox.HeaderKeySeq, "03")

	cons := e.consumer(e.js)
	batch, err := cons.Fetch(4, jetstream.FetchMaxWait(time.Minute))
	require.NoError(t, err)
	var msgs []jetstream.Msg
	for m := range batch.Messages() {
		msgs = append(msgs, m)
	}
	require.NoError(t, batch.Error())
	require.Len(t, msgs, 4)

	m, err := natsinbox.Message(msgs[0])
	require.NoError(t, err)
	assert.Equal(t, published.ID, m.ID)
	assert.Equal(t, "customer-7", m.Key)
	assert.Equal(t, int64(3), m.Seq)
	assert.Same(t, msgs[0], m.Data.(jetstream.Msg))
	assert.Nil(t, m.Offset)

	m, err = natsinbox.Message(msgs[1])
	require.NoError(t, err)
	assert.Equal(t, inbox.Message{ID: "only-msg-id", Data: msgs[1]}, m)

	_, err = natsinbox.Message(msgs[2])
	require.ErrorIs(t, err, inbox.ErrInvalidMessage)
	assert.Contains(t, err.Error(), "outbox-id")

	_, err = natsinbox.Message(msgs[3])
	require.ErrorIs(t, err, inbox.ErrInvalidMessage)
	assert.Contains(t, err.Error(), outbox.HeaderKeySeq)
}

func TestNewConsumerRefusesAnAckPolicyOtherThanExplicit(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ib := newInbox(t, inbox.Options{})
	h := newEffects().Handler(isMsg, nil)
	for _, p := range []jetstream.AckPolicy{jetstream.AckNonePolicy, jetstream.AckAllPolicy} {
		cons := e.consumer(e.js, func(c *jetstream.ConsumerConfig) { c.AckPolicy = p })
		_, err := natsinbox.NewConsumer(ib, h, cons, natsinbox.Options{})
		require.ErrorIs(t, err, inbox.ErrInvalidArgument, "%s", p)
		assert.Contains(t, err.Error(), "AckExplicitPolicy")
	}
	cons := e.consumer(e.js)
	_, err := natsinbox.NewConsumer(nil, h, cons, natsinbox.Options{})
	require.ErrorIs(t, err, inbox.ErrInvalidArgument)
	_, err = natsinbox.NewConsumer(ib, h, cons, natsinbox.Options{NakDelay: -time.Second})
	require.ErrorIs(t, err, inbox.ErrInvalidArgument)
	_, err = natsinbox.NewConsumer(ib, h, cons, natsinbox.Options{})
	require.NoError(t, err)
}

// The consumer commits, then loses its connection before the Ack: the
// message is redelivered after AckWait, and the next consumer skips it as
// a duplicate and acknowledges it. The effect stays applied once.
func TestLostAckIsRedeliveredAndSkippedAsDuplicate(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ib := newInbox(t, inbox.Options{})
	e.publish("outbox-id", "entry-1", "outbox-key", "k", outbox.HeaderKeySeq, "1")
	durable := "c" + suffix()
	cons := e.consumer(e.js, func(c *jetstream.ConsumerConfig) {
		c.Durable = durable
		c.AckWait = time.Second
	})

	// First consumer: its own connection, closed right after the commit.
	nc1, js1 := e.connect()
	cons1, err := js1.Consumer(ctxT(t), e.stream, durable)
	require.NoError(t, err)
	fx := newEffects()
	var calls sync.Map
	h := func(ctx context.Context, tx *inbox.MemoryTx, m inbox.Message) error {
		n, _ := calls.LoadOrStore(m.ID, new(int))
		*n.(*int)++
		tx.OnCommit(func() {
			fx.Add(effect{ID: m.ID, Key: m.Key, Seq: m.Seq})
			nc1.Close() // the Ack that follows the commit is lost
		})
		return nil
	}
	c1, err := natsinbox.NewConsumer(ib, h, cons1, natsinbox.Options{})
	require.NoError(t, err)
	err = c1.Run(ctxT(t))
	require.Error(t, err, "Run goes on after its connection closed")
	t.Log("first Run:", err)
	assert.Len(t, fx.Wait(t, 1), 1)

	// Second consumer, on a new connection: the redelivery is a
	// duplicate, acknowledged without running the handler.
	_, js2 := e.connect()
	cons2, err := js2.Consumer(ctxT(t), e.stream, durable)
	require.NoError(t, err)
	c2, err := natsinbox.NewConsumer(ib, h, cons2, natsinbox.Options{})
	require.NoError(t, err)
	stop := runConsumer(t, c2)
	eventually(t, "the message is redelivered and acknowledged", func() bool {
		ci := info(t, cons)
		return ci.Delivered.Consumer >= 2 && ci.NumAckPending == 0 && ci.NumPending == 0
	})
	require.NoError(t, stop())
	list, _ := fx.Snapshot()
	assert.Equal(t, []effect{{ID: "entry-1", Key: "k", Seq: 1}}, list)
	n, _ := calls.Load("entry-1")
	assert.Equal(t, 1, *n.(*int), "the handler ran once; the redelivery was skipped")
}

// A handler error rolls the batch back; Run tries it again in place
// (Attempts), then Naks it; the message is applied once, and the key's
// order holds: retried in place whatever MaxAckPending, or Nak'd with
// MaxAckPending 1, where the failed message comes back before the next.
func TestHandlerErrorIsRetriedThenNakedAndAppliedOnce(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name          string
		attempts      int
		maxAckPending int
		wantDelivered uint64 // e2's deliveries
	}{
		{"NakedWithMaxAckPending1", 1, 1, 3},
		{"RetriedInPlace", 3, 0, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			ib := newInbox(t, inbox.Options{}) // GapApply: a key out of order shows in the effects
			for i := 1; i <= 3; i++ {
				e.publish("outbox-id", "e"+strconv.Itoa(i), "outbox-key", "k", outbox.HeaderKeySeq, strconv.Itoa(i))
			}
			cons := e.consumer(e.js, func(c *jetstream.ConsumerConfig) { c.MaxAckPending = tc.maxAckPending })
			fx := newEffects()
			var (
				mu        sync.Mutex
				failures  int
				delivered uint64
			)
			h := fx.Handler(isMsg, func(m inbox.Message) error {
				if m.ID != "e2" {
					return nil
				}
				mu.Lock()
				defer mu.Unlock()
				md, err := m.Data.(jetstream.Msg).Metadata()
				if err != nil {
					return err
				}
				delivered = md.NumDelivered
				if failures < 2 {
					failures++
					return errors.New("the database is down")
				}
				return nil
			})
			c, err := natsinbox.NewConsumer(ib, h, cons, natsinbox.Options{Attempts: tc.attempts, NakDelay: 10 * time.Millisecond})
			require.NoError(t, err)
			stop := runConsumer(t, c)
			got := fx.Wait(t, 3)
			eventually(t, "every message acknowledged", func() bool {
				ci := info(t, cons)
				return ci.NumAckPending == 0 && ci.NumPending == 0
			})
			require.NoError(t, stop())
			assert.Equal(t, []effect{{ID: "e1", Key: "k", Seq: 1}, {ID: "e2", Key: "k", Seq: 2}, {ID: "e3", Key: "k", Seq: 3}}, got)
			assert.Equal(t, tc.wantDelivered, delivered, "e2's deliveries")
			assert.Equal(t, 2, failures)
		})
	}
}

// Many keys, interleaved, some messages stored twice (copies outside the
// stream's duplicate window): each entry is applied once, each key's in
// order (under GapApply, an order violation shows in the effects).
func TestManyKeysExactlyOnceInKeyOrder(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ib := newInbox(t, inbox.Options{}) // GapApply: a key out of order shows in the effects
	const keys, perKey = 8, 40
	var all []outbox.Entry
	for s := 1; s <= perKey; s++ {
		for k := range keys {
			all = append(all, entry(e.subject+".orders", "key-"+strconv.Itoa(k), s))
		}
	}
	sink, err := natssink.Dial(e.url, natssink.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = sink.Close() })
	cons := e.consumer(e.js)
	dups := 0
	for i := 0; i < len(all); i += 40 {
		chunk := all[i : i+40]
		for j, err := range sink.Publish(ctxT(t), chunk) {
			require.NoError(t, err, "entry %d", i+j)
		}
		// Copies of some of the chunk's entries, after them, with a
		// Nats-Msg-Id of their own so the stream keeps them.
		for _, d := range chunk[:rand.IntN(6)] {
			e.publish("outbox-id", d.ID, "outbox-key", d.Key, outbox.HeaderKeySeq, d.Headers[outbox.HeaderKeySeq], nats.MsgIdHdr, "copy-"+d.ID)
			dups++
		}
	}
	fx := newEffects()
	c, err := natsinbox.NewConsumer(ib, fx.Handler(isMsg, nil), cons, natsinbox.Options{MaxBatch: 16})
	require.NoError(t, err)
	start := time.Now()
	stop := runConsumer(t, c)
	fx.Wait(t, len(all))
	eventually(t, "every message acknowledged", func() bool {
		ci := info(t, cons)
		return ci.NumAckPending == 0 && ci.NumPending == 0
	})
	require.NoError(t, stop())
	t.Logf("%d entries and %d copies consumed in %v", len(all), dups, time.Since(start))
	got, _ := fx.Snapshot()
	require.Len(t, got, len(all), "each entry once, copies skipped")
	seen := map[string]bool{}
	last := map[string]int64{}
	for _, f := range got {
		require.False(t, seen[f.ID], "entry %s applied twice", f.ID)
		seen[f.ID] = true
		require.Equal(t, last[f.Key]+1, f.Seq, "key %s out of order", f.Key)
		last[f.Key] = f.Seq
	}
	for k := range keys {
		assert.Equal(t, int64(perKey), last["key-"+strconv.Itoa(k)])
	}
}

// A message without an ID is terminated (JetStream says so with an
// advisory) and the ones after it are applied.
func TestMessageWithoutIDIsTerminated(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ib := newInbox(t, inbox.Options{})
	durable := "c" + suffix()
	cons := e.consumer(e.js, func(c *jetstream.ConsumerConfig) { c.Durable = durable })
	adv, err := e.nc.SubscribeSync(fmt.Sprintf("$JS.EVENT.ADVISORY.CONSUMER.MSG_TERMINATED.%s.%s", e.stream, durable))
	require.NoError(t, err)
	require.NoError(t, e.nc.Flush())
	e.publish("outbox-key", "k")
	e.publish("outbox-id", "entry-2")
	fx := newEffects()
	c, err := natsinbox.NewConsumer(ib, fx.Handler(isMsg, nil), cons, natsinbox.Options{})
	require.NoError(t, err)
	stop := runConsumer(t, c)
	got := fx.Wait(t, 1)
	msg, err := adv.NextMsg(time.Minute)
	require.NoError(t, err, "no MSG_TERMINATED advisory")
	assert.Contains(t, string(msg.Data), `"deliveries":1`, "terminated on its first delivery")
	eventually(t, "nothing left to deliver or acknowledge", func() bool {
		ci := info(t, cons)
		return ci.NumAckPending == 0 && ci.NumPending == 0 && ci.NumRedelivered == 0
	})
	require.NoError(t, stop())
	assert.Equal(t, []effect{{ID: "entry-2"}}, got)
}

// When its context ends, Run Naks what it pulled and did not apply, so
// another consumer gets it at once rather than after AckWait (5 minutes
// here, longer than the test waits).
func TestStoppedRunNaksWhatItDidNotApply(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ib := newInbox(t, inbox.Options{})
	const n = 20
	for i := range n {
		e.publish("outbox-id", "e"+strconv.Itoa(i))
	}
	cons := e.consumer(e.js, func(c *jetstream.ConsumerConfig) { c.AckWait = 5 * time.Minute })
	blocked := make(chan struct{})
	var once sync.Once
	fx := newEffects()
	stuck := func(ctx context.Context, tx *inbox.MemoryTx, m inbox.Message) error {
		once.Do(func() { close(blocked) })
		<-ctx.Done() // a handler that does not finish before the stop
		return ctx.Err()
	}
	c1, err := natsinbox.NewConsumer(ib, stuck, cons, natsinbox.Options{MaxBatch: 4})
	require.NoError(t, err)
	stop := runConsumer(t, c1)
	<-blocked
	eventually(t, "messages pulled ahead", func() bool { return info(t, cons).NumAckPending > 4 })
	require.NoError(t, stop(), "Run returns nil when its context ends")

	c2, err := natsinbox.NewConsumer(ib, fx.Handler(isMsg, nil), cons, natsinbox.Options{MaxBatch: 4})
	require.NoError(t, err)
	stop = runConsumer(t, c2)
	got := fx.Wait(t, n)
	require.NoError(t, stop())
	assert.Len(t, got, n)
}

// A message that always fails is Nak'd until the consumer's MaxDeliver;
// JetStream then stops delivering it and says so with the MAX_DELIVERIES
// advisory (where a dead-letter process picks it up), and the messages
// after it are applied.
func TestMessageThatAlwaysFailsStopsAtMaxDeliver(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	durable := "c" + suffix()
	cons := e.consumer(e.js, func(c *jetstream.ConsumerConfig) {
		c.Durable = durable
		c.MaxDeliver = 3
	})
	adv, err := e.nc.SubscribeSync(fmt.Sprintf("$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.%s.%s", e.stream, durable))
	require.NoError(t, err)
	require.NoError(t, e.nc.Flush())
	e.publish("outbox-id", "poison")
	e.publish("outbox-id", "entry-2")
	fx := newEffects()
	var (
		mu    sync.Mutex
		tries int
	)
	h := fx.Handler(isMsg, func(m inbox.Message) error {
		if m.ID != "poison" {
			return nil
		}
		mu.Lock()
		defer mu.Unlock()
		tries++
		return errors.New("cannot apply this one")
	})
	c, err := natsinbox.NewConsumer(newInbox(t, inbox.Options{}), h, cons, natsinbox.Options{Attempts: 1, NakDelay: 10 * time.Millisecond})
	require.NoError(t, err)
	stop := runConsumer(t, c)
	msg, err := adv.NextMsg(time.Minute)
	require.NoError(t, err, "no MAX_DELIVERIES advisory")
	assert.Contains(t, string(msg.Data), `"deliveries":3`)
	got := fx.Wait(t, 1)
	require.NoError(t, stop())
	assert.Equal(t, []effect{{ID: "entry-2"}}, got)
	mu.Lock()
	defer mu.Unlock()
	assert.Equal(t, 3, tries, "one try per delivery, MaxDeliver of them")
}
