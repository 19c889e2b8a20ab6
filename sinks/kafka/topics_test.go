package kafkasink_test

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outboxrelay/outbox"
	"github.com/outboxrelay/outbox/backends/memory"
	"github.com/outboxrelay/outbox/backoff"
	kafkasink "github.com/outboxrelay/outbox/sinks/kafka"
)

// relayRun appends entries to a memory backend and runs a relay over it
// into sink until no entry is pending (failing t after 60s), then returns
// the backend and the relay's stats.
func relayRun(t *testing.T, sink outbox.Sink, es []outbox.Entry, during func(*outbox.Relay)) (*memory.Backend, outbox.RelayStats) {
	t.Helper()
	b := memory.New(memory.Options{Partitions: 2})
	t.Cleanup(func() { _ = b.Close() })
	ctx := context.Background()
	tx := b.Begin()
	require.NoError(t, b.AppendInTx(ctx, tx, es...))
	require.NoError(t, tx.Commit())
	relay, err := outbox.NewRelay(b, sink, outbox.RelayOptions{
		PollInterval:     20 * time.Millisecond,
		Backoff:          backoff.Policy{Base: 50 * time.Millisecond, Max: 500 * time.Millisecond, MaxAttempts: -1},
		BreakerThreshold: -1,
		Logger:           slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn})),
	})
	require.NoError(t, err)
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	require.NoError(t, relay.Start(rctx))
	defer func() { _ = relay.Stop(context.Background()) }()
	deadline := time.Now().Add(60 * time.Second)
	for {
		if during != nil {
			during(relay)
		}
		st, err := b.Stats(ctx)
		require.NoError(t, err)
		if st.Pending == 0 {
			return b, relay.Stats()
		}
		require.True(t, time.Now().Before(deadline), "entries still pending: %+v, relay %+v", st, relay.Stats())
		time.Sleep(10 * time.Millisecond)
	}
}

// TestTopicCreatedAfterTheFirstPublish: the relay starts publishing to a
// topic that does not exist yet (automatic creation off); once the first
// publish has failed, the topic is created. Nothing parks, every entry
// arrives, and each key's first deliveries are in append order.
func TestTopicCreatedAfterTheFirstPublish(t *testing.T) {
	t.Parallel()
	c := newCluster(t, 3, nil)
	sink, err := kafkasink.Dial(c.ListenAddrs(), kafkasink.Options{}) // default UnknownTopicTimeout
	require.NoError(t, err)
	defer sink.Close()

	const keys, perKey = 20, 5
	var es []outbox.Entry
	for s := range perKey {
		for k := range keys {
			es = append(es, outbox.Entry{ID: fmt.Sprintf("k%02d-%d", k, s), Topic: "late", Key: fmt.Sprintf("key-%02d", k), Payload: []byte(strconv.Itoa(s))})
		}
	}
	created := false
	b, stats := relayRun(t, sink, es, func(r *outbox.Relay) {
		if !created && r.Stats().Retried > 0 {
			createTopic(t, c, "late", 3)
			created = true
		}
	})
	require.True(t, created)
	st, err := b.Stats(context.Background())
	require.NoError(t, err)
	assert.Zero(t, st.Parked, "nothing parks")
	assert.Zero(t, stats.Parked)
	assert.Positive(t, stats.Retried, "the first publishes failed")

	next := map[string]int{}
	seen := map[string]bool{}
	for _, rec := range consumeQuiet(t, c, []string{"late"}) {
		id := kafkasink.EntryID(rec)
		if seen[id] {
			continue
		}
		seen[id] = true
		seq, err := strconv.Atoi(string(rec.Value))
		require.NoError(t, err)
		assert.Equal(t, next[string(rec.Key)], seq, "key %s: first deliveries out of order", rec.Key)
		next[string(rec.Key)] = seq + 1
	}
	assert.Len(t, seen, keys*perKey, "every entry arrives")
	t.Logf("relay %+v", stats)
}

// TestTopicThatNeverAppearsParks: an entry of a topic that is never
// created is retried until the topic has been unknown for
// UnknownTopicTimeout, then parks with a reason naming the topic; the
// later entry of its key, for a topic that exists, is then delivered.
func TestTopicThatNeverAppearsParks(t *testing.T) {
	t.Parallel()
	c := newCluster(t, 1, []string{"events"})
	sink, err := kafkasink.Dial(c.ListenAddrs(), kafkasink.Options{UnknownTopicTimeout: 300 * time.Millisecond}, fastRetry...)
	require.NoError(t, err)
	defer sink.Close()
	b, stats := relayRun(t, sink, []outbox.Entry{
		{ID: "e1", Topic: "never", Key: "k", Payload: []byte("1")},
		{ID: "e2", Topic: "events", Key: "k", Payload: []byte("2")},
	}, nil)
	parked, err := b.Parked(context.Background(), "", 10)
	require.NoError(t, err)
	require.Len(t, parked, 1)
	assert.Equal(t, "e1", parked[0].ID)
	assert.Contains(t, parked[0].LastError, `topic "never"`)
	assert.Contains(t, parked[0].LastError, "UnknownTopicTimeout")
	assert.Contains(t, parked[0].LastError, kerr.UnknownTopicOrPartition.Message)
	assert.Greater(t, parked[0].Attempts, 1, "retried before it parked")
	recs := consumeQuiet(t, c, []string{"events"})
	require.Len(t, recs, 1)
	assert.Equal(t, "e2", kafkasink.EntryID(recs[0]))
	t.Logf("relay %+v", stats)
}

// TestTransactionalUnknownTopicFailsOnlyItself: in transactional mode an
// entry of an unknown topic fails (transient, naming the topic) without
// failing the rest of its batch, which is committed without it.
func TestTransactionalUnknownTopicFailsOnlyItself(t *testing.T) {
	t.Parallel()
	c := newCluster(t, 1, []string{"t"})
	sink, err := kafkasink.Dial(c.ListenAddrs(), kafkasink.Options{TransactionalIDPrefix: "unknown-"}, fastRetry...)
	require.NoError(t, err)
	defer sink.Close()
	msgs := batch("b", 4, 0)
	msgs[1].Topic = "missing"
	errs := sink.Publish(context.Background(), msgs)
	for i, err := range errs {
		if i == 1 {
			require.ErrorIs(t, err, kerr.UnknownTopicOrPartition)
			assert.Equal(t, backoff.ClassTransient, backoff.ClassOf(err), "%v", err)
			assert.Contains(t, err.Error(), `topic "missing"`)
			continue
		}
		assert.NoError(t, err, "entry %d", i)
	}
	recs := consumeQuiet(t, c, []string{"t"}, kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	assert.Len(t, recs, 3)
}
