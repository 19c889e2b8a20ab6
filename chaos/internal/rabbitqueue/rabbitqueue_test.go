package rabbitqueue_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/outboxrelay/outbox/chaos/history"
	"github.com/outboxrelay/outbox/chaos/internal/checktest"
	"github.com/outboxrelay/outbox/chaos/internal/rabbitqueue"
	"github.com/outboxrelay/outbox/internal/testenv"
)

// topology declares an exchange with a checked queue and a tap queue of
// their own on the shared server (or skips), and returns a confirming
// channel to publish with.
func topology(t *testing.T) (exchange, queue, tap string, ch *amqp.Channel) {
	t.Helper()
	url := testenv.AMQPURL()
	conn, err := amqp.DialConfig(url, amqp.Config{Dial: amqp.DefaultDial(5 * time.Second)})
	if err != nil {
		testenv.Unavailable(t, "RabbitMQ", "OUTBOX_AMQP_URL", err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	var b [4]byte
	_, _ = rand.Read(b[:])
	exchange = "chaos-test-" + hex.EncodeToString(b[:])
	queue, tap = exchange+"-checked", exchange+"-tap"
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	require.NoError(t, rabbitqueue.Setup(ctx, url, exchange, queue, tap))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		require.NoError(t, rabbitqueue.Delete(ctx, url, exchange, queue, tap))
	})
	ch, err = conn.Channel()
	require.NoError(t, err)
	require.NoError(t, ch.Confirm(false))
	return exchange, queue, tap, ch
}

func publish(t *testing.T, ch *amqp.Channel, exchange, id, key string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := ch.PublishWithDeferredConfirmWithContext(ctx, exchange, key, true, false, amqp.Publishing{
		MessageId: id, DeliveryMode: amqp.Persistent, Body: []byte("payload of " + id),
		Headers: amqp.Table{rabbitqueue.KeyHeader: key},
	})
	require.NoError(t, err)
	ok, err := c.WaitContext(ctx)
	require.NoError(t, err)
	require.True(t, ok, "confirmed")
}

func TestConsumeReturnsTheQueueInOrderAndLeavesIt(t *testing.T) {
	t.Parallel()
	exchange, queue, tapQueue, ch := topology(t)
	url := testenv.AMQPURL()
	tap := rabbitqueue.StartTap(url, tapQueue)
	defer tap.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	ds, err := rabbitqueue.Consume(ctx, url, queue)
	require.NoError(t, err)
	require.Empty(t, ds, "an empty queue")

	before := time.Now()
	for i := range 1500 {
		publish(t, ch, exchange, fmt.Sprintf("id-%04d", i), fmt.Sprintf("k%d", i%7))
	}
	// Without message_id, the ID comes from the outbox-id header; without
	// outbox-key, the key is the routing key.
	_, err = ch.PublishWithDeferredConfirmWithContext(ctx, exchange, "rk", true, false, amqp.Publishing{
		Headers: amqp.Table{rabbitqueue.IDHeader: "header-id"}, DeliveryMode: amqp.Persistent,
	})
	require.NoError(t, err)

	require.Eventually(t, func() bool {
		ds, err = rabbitqueue.Consume(ctx, url, queue)
		require.NoError(t, err)
		return len(ds) == 1501
	}, 20*time.Second, 50*time.Millisecond)
	for i, d := range ds[:1500] {
		require.Equal(t, queue, d.Topic)
		require.Equal(t, int32(0), d.Partition)
		require.Equal(t, int64(i), d.Offset, "queue position")
		require.Equal(t, fmt.Sprintf("id-%04d", i), d.ID)
		require.Equal(t, fmt.Sprintf("k%d", i%7), d.Key)
		require.True(t, d.At.IsZero(), "no time before Stamp")
	}
	require.Equal(t, "header-id", ds[1500].ID)
	require.Equal(t, "rk", ds[1500].Key)

	// The tap saw every message arrive, in order.
	require.Eventually(t, func() bool {
		cp := append([]history.Delivery(nil), ds...)
		return tap.Stamp(cp) == 0
	}, 20*time.Second, 50*time.Millisecond, "the tap sees every message")
	require.Zero(t, tap.Stamp(ds))
	for i, d := range ds {
		require.WithinDuration(t, before, d.At, time.Minute)
		if i > 0 {
			require.False(t, d.At.Before(ds[i-1].At), "arrival times in queue order")
		}
	}

	// Nothing was acknowledged: a second call reads the same, in the same
	// order, plus what came since.
	publish(t, ch, exchange, "late", "k0")
	again, err := rabbitqueue.Consume(ctx, url, queue)
	require.NoError(t, err)
	require.Len(t, again, 1502)
	for i := range ds {
		require.Equal(t, ds[i].ID, again[i].ID)
	}
}

func TestConsumeOfAMissingQueueFailsWhenCtxEnds(t *testing.T) {
	t.Parallel()
	_, queue, _, _ := topology(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_, err := rabbitqueue.Consume(ctx, testenv.AMQPURL(), queue+"-missing")
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.ErrorContains(t, err, "NOT_FOUND")
}

// TestCheckerCatchesALostAndAReorderedMessage is the negative check for
// this broker: a queue missing a committed entry, and holding two of a
// key's entries swapped, fails the check.
func TestCheckerCatchesALostAndAReorderedMessage(t *testing.T) {
	t.Parallel()
	exchange, queue, _, ch := topology(t)
	// e2 never published; e5 before e4.
	for _, id := range checktest.Published {
		publish(t, ch, exchange, id, checktest.Key)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	ds, err := rabbitqueue.Consume(ctx, testenv.AMQPURL(), queue)
	require.NoError(t, err)
	checktest.RequireCaught(t, ds)
}
