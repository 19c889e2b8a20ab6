package kafkasink_test

import (
	"context"
	"log/slog"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/outboxrelay/outbox"
	"github.com/outboxrelay/outbox/backends/memory"
	"github.com/outboxrelay/outbox/backoff"
	kafkasink "github.com/outboxrelay/outbox/sinks/kafka"
)

// headCounter is the Kafka sink, counting the Publish calls that carry
// the entry head: the relay's attempts of it. It keeps the sink's
// KeyOrderer and LandingBounder.
type headCounter struct {
	*kafkasink.Sink
	head     string
	attempts *atomic.Int64
}

func (s headCounter) Publish(ctx context.Context, msgs []outbox.Entry) []error {
	if slices.ContainsFunc(msgs, func(e outbox.Entry) bool { return e.ID == s.head }) {
		s.attempts.Add(1)
	}
	return s.Sink.Publish(ctx, msgs)
}

// TestRelayKeepsEveryBrokerErrorWhenTheBreakerOpens: the head of a key
// fails through five attempts, each with a different broker error, and
// then its topic's circuit breaker opens (another topic works). The
// entry's attempt history lists the five errors in order and its last
// error is the broker's fifth, not the breaker's: the open breaker defers
// it without counting an attempt. A hot key of the topic appended while
// the breaker is open, which the Kafka sink (a KeyOrderer) gets in one
// round, has only its first entry deferred; none of its entries is
// counted an attempt.
func TestRelayKeepsEveryBrokerErrorWhenTheBreakerOpens(t *testing.T) {
	t.Parallel()
	c := newCluster(t, 1, []string{"shipments", "healthy"})
	brokerErrs := []*kerr.Error{kerr.NotEnoughReplicas, kerr.NotLeaderForPartition, kerr.LeaderNotAvailable, kerr.KafkaStorageError, kerr.UnknownServerError}
	var attempt atomic.Int64 // the relay's attempt of the head now published, from 1
	for i, e := range brokerErrs {
		c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: "shipments", Err: e, Count: -1,
			When: func(kmsg.Request) bool { return attempt.Load() == int64(i+1) }})
	}
	ks, err := kafkasink.New(newClient(t, c, append(fastRetry, kgo.RecordRetries(1))...), kafkasink.Options{PublishTimeout: 2 * time.Second})
	require.NoError(t, err)
	require.True(t, ks.KeepsKeyOrder())
	sink := headCounter{Sink: ks, head: "ship-0", attempts: &attempt}

	b := memory.New(memory.Options{})
	defer b.Close()
	ctx := context.Background()
	appendEntries := func(es ...outbox.Entry) {
		t.Helper()
		tx := b.Begin()
		require.NoError(t, b.AppendInTx(ctx, tx, es...))
		require.NoError(t, tx.Commit())
	}
	lookup := func(id string) outbox.EntryInfo {
		t.Helper()
		info, err := b.Lookup(ctx, id)
		require.NoError(t, err)
		return info
	}
	waitUntil := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s", what)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}

	relay, err := outbox.NewRelay(b, sink, outbox.RelayOptions{
		BatchSize:        64,
		PollInterval:     20 * time.Millisecond,
		LeaseTTL:         30 * time.Second, // above RenewMargin plus the sink's landing bound
		Backoff:          backoff.Policy{Base: 10 * time.Millisecond, Max: 20 * time.Millisecond, Min: 10 * time.Millisecond, MaxAttempts: 10},
		BreakerThreshold: len(brokerErrs),
		BreakerCooldown:  time.Hour,
		Logger:           slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn})),
	})
	require.NoError(t, err)
	require.NoError(t, relay.Start(ctx))
	defer func() { _ = relay.Stop(context.Background()) }()

	// The healthy topic works, so an open breaker of shipments is that
	// topic's problem (its entries are deferred), not an outage.
	appendEntries(entry("healthy-0", "healthy", "h", "x"), entry("ship-0", "shipments", "ship", "0"))
	waitUntil("ship-0's first attempt", func() bool { return lookup("ship-0").Attempts >= 1 })
	// Later entries of the key wait behind the failing head.
	appendEntries(entry("ship-1", "shipments", "ship", "1"), entry("ship-2", "shipments", "ship", "2"))
	waitUntil("ship-0 deferred by the open breaker", func() bool {
		info := lookup("ship-0")
		if info.Attempts > len(brokerErrs) || info.Parked {
			t.Fatalf("ship-0 has %d attempts (parked %v, last error %q) though the sink was handed it %d times: the open breaker counted attempts",
				info.Attempts, info.Parked, info.LastError, attempt.Load())
		}
		return info.Deferred
	})

	head := lookup("ship-0")
	require.Equal(t, 5, head.Attempts, "five attempts, the deferral not counted; history %v", head.History)
	require.Len(t, head.History, 5)
	for i, a := range head.History {
		require.Contains(t, a.Error, brokerErrs[i].Message, "attempt %d's error", i+1)
		require.Equal(t, relay.Owner(), a.Owner, "attempt %d's relay", i+1)
		if i > 0 {
			require.False(t, a.At.Before(head.History[i-1].At), "attempts in order")
		}
	}
	require.Contains(t, head.LastError, brokerErrs[4].Message, "the last error is the broker's")
	require.NotContains(t, head.LastError, "circuit breaker")
	require.False(t, head.Parked)
	require.EqualValues(t, 5, attempt.Load(), "the sink was handed ship-0 five times")

	// The review's case: a hot key appended while the breaker is open.
	var hot []outbox.Entry
	for _, id := range []string{"hot-0", "hot-1", "hot-2", "hot-3"} {
		hot = append(hot, entry(id, "shipments", "hot", id))
	}
	appendEntries(hot...)
	relay.Notify()
	waitUntil("hot-0 deferred", func() bool { return lookup("hot-0").Deferred })
	time.Sleep(200 * time.Millisecond) // ten polls more
	for _, id := range []string{"ship-1", "ship-2", "hot-0", "hot-1", "hot-2", "hot-3"} {
		info := lookup(id)
		require.Zero(t, info.Attempts, "%s was never handed to the sink", id)
		require.Empty(t, info.History, id)
		require.False(t, info.Parked, id)
		require.Equal(t, id == "hot-0", info.Deferred, "%s: only the first entry of the key is deferred", id)
	}
	require.EqualValues(t, 5, attempt.Load(), "ship-0 not published while the breaker is open")
	for _, rec := range consumeQuiet(t, c, []string{"shipments"}) {
		t.Fatalf("%s reached Kafka while every produce of shipments failed or its breaker was open", kafkasink.EntryID(rec))
	}
}
