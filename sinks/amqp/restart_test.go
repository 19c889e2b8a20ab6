package amqpsink_test

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/outboxrelay/outbox"
	"github.com/outboxrelay/outbox/backends/memory"
	"github.com/outboxrelay/outbox/backoff"
	amqpsink "github.com/outboxrelay/outbox/sinks/amqp"
)

// TestBrokerRestartDuringRelayDrain drains 20,000 entries over 200 keys
// from the memory backend through the relay and the sink into a durable
// queue of the private node, and SIGKILLs the node in the middle of the
// drain, then starts it again on the same port and data. Afterwards the
// queue holds every entry (nothing confirmed was lost with the node), each
// key's first deliveries are in order, and the duplicates (entries whose
// confirms the kill lost, published again) are counted and logged.
//
// Not parallel: it kills the node the parallel tests use, while they wait
// for the sequential tests.
func TestBrokerRestartDuringRelayDrain(t *testing.T) {
	n := privateNode(t)
	const keys, perKey = 200, 100
	const total = keys * perKey
	exchange, queue := uniq("restart"), uniq("restart-q")
	setup, err := amqp.Dial(n.URL())
	require.NoError(t, err)
	sch, err := setup.Channel()
	require.NoError(t, err)
	require.NoError(t, sch.ExchangeDeclare(exchange, "topic", true, false, false, false, nil))
	_, err = sch.QueueDeclare(queue, true, false, false, false, nil)
	require.NoError(t, err)
	require.NoError(t, sch.QueueBind(queue, "#", exchange, false, nil))
	_ = setup.Close()
	// Declared just before the kill: on disk first (see SyncMetadata).
	ctlCtx, cancelCtl := context.WithTimeout(context.Background(), time.Minute)
	require.NoError(t, n.SyncMetadata(ctlCtx))
	cancelCtl()

	sink, err := amqpsink.Dial(n.URL(), amqpsink.Options{MaxReconnectDelay: 500 * time.Millisecond})
	require.NoError(t, err)
	defer sink.Close()

	ctx := context.Background()
	const partitions, maxInFlight = 4, 500
	b := memory.New(memory.Options{Partitions: partitions})
	defer b.Close()
	for r := range perKey {
		tx := b.Begin()
		es := make([]outbox.Entry, 0, keys)
		for k := range keys {
			es = append(es, outbox.Entry{ID: fmt.Sprintf("k%03d-%03d", k, r), Topic: exchange, Key: fmt.Sprintf("key-%03d", k), Payload: []byte(strconv.Itoa(r))})
		}
		require.NoError(t, b.AppendInTx(ctx, tx, es...))
		require.NoError(t, tx.Commit())
	}
	relay, err := outbox.NewRelay(b, sink, outbox.RelayOptions{
		BatchSize:        maxInFlight,
		MaxInFlight:      maxInFlight,
		PollInterval:     20 * time.Millisecond,
		Backoff:          backoff.Policy{Base: 20 * time.Millisecond, Max: 500 * time.Millisecond, MaxAttempts: -1},
		BreakerThreshold: -1,
		Logger:           slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn})),
	})
	require.NoError(t, err)
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	start := time.Now()
	require.NoError(t, relay.Start(rctx))
	defer func() { _ = relay.Stop(context.Background()) }()

	pending := func() int64 {
		st, err := b.Stats(ctx)
		require.NoError(t, err)
		return st.Pending
	}
	waitFor(t, func() bool { return pending() <= total*3/4 }, "a quarter of the drain")
	atKill := total - pending()
	n.Kill()
	down := time.Now()
	sctx, scancel := context.WithTimeout(ctx, 2*time.Minute)
	require.NoError(t, n.Start(sctx))
	scancel()
	t.Logf("node killed after %d of %d entries were sent, back after %v", atKill, total, time.Since(down).Round(time.Millisecond))

	deadline := time.Now().Add(2 * time.Minute)
	for pending() > 0 {
		require.True(t, time.Now().Before(deadline), "entries still pending: %d, relay %+v", pending(), relay.Stats())
		time.Sleep(50 * time.Millisecond)
	}
	drained := time.Since(start)
	st, err := b.Stats(ctx)
	require.NoError(t, err)
	assert.Zero(t, st.Parked, "no entry parked")

	got := readQueue(t, n.URL(), queue)
	first := map[string]bool{}
	next := map[string]int{}
	dups := 0
	for _, d := range got {
		if first[d.MessageId] {
			dups++
			continue
		}
		first[d.MessageId] = true
		v, err := strconv.Atoi(string(d.Body))
		require.NoError(t, err)
		assert.Equal(t, next[d.RoutingKey], v, "key %s: first deliveries out of order", d.RoutingKey)
		next[d.RoutingKey] = v + 1
	}
	assert.Len(t, first, total, "every entry is in the queue")
	// Only entries whose confirms the kill lost are published twice: at
	// most what the relay had handed the sink then, MaxInFlight per
	// partition.
	assert.LessOrEqual(t, dups, partitions*maxInFlight, "duplicates bounded by what was in flight at the kill")
	t.Logf("restart drain: %d entries over %d keys in %v; %d messages in the queue, %d distinct, %d duplicates",
		total, keys, drained.Round(time.Millisecond), len(got), len(first), dups)
}

// readQueue takes every message of queue.
func readQueue(t *testing.T, url, queue string) []amqp.Delivery {
	t.Helper()
	conn, err := amqp.Dial(url)
	require.NoError(t, err)
	defer conn.Close()
	ch, err := conn.Channel()
	require.NoError(t, err)
	q, err := ch.QueueDeclarePassive(queue, true, false, false, false, nil)
	require.NoError(t, err)
	require.NoError(t, ch.Qos(1000, 0, false))
	ds, err := ch.Consume(queue, "", true, true, false, false, nil)
	require.NoError(t, err)
	out := make([]amqp.Delivery, 0, q.Messages)
	timeout := time.After(time.Minute)
	for len(out) < q.Messages {
		select {
		case d := <-ds:
			out = append(out, d)
		case <-timeout:
			t.Fatalf("read %d of %d messages", len(out), q.Messages)
		}
	}
	return out
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}
