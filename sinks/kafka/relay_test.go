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
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/outboxrelay/outbox"
	"github.com/outboxrelay/outbox/backends/memory"
	"github.com/outboxrelay/outbox/backoff"
	kafkasink "github.com/outboxrelay/outbox/sinks/kafka"
)

// TestRelayEndToEndUnderFaults runs the relay from the memory backend to
// kfake through the sink while produce requests fail: every entry
// arrives, the first delivery of each key's entries is in append order,
// and the entries that can never be published end parked.
func TestRelayEndToEndUnderFaults(t *testing.T) {
	t.Parallel()
	c := newCluster(t, 3, []string{"events"}, kfake.BrokerConfigs(map[string]string{"message.max.bytes": "8192"}))
	// Transient and semi-transient faults, spread over the run.
	c.Fault(
		kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: "events", Err: kerr.NotEnoughReplicas, Count: 40},
		kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: "events", Err: kerr.NotLeaderForPartition, Count: 10},
		kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: "events", Partitions: []int32{1}, Err: kerr.RequestTimedOut, Count: 3},
	)
	sink, err := kafkasink.Dial(c.ListenAddrs(), kafkasink.Options{PublishTimeout: 2 * time.Second, UnknownTopicTimeout: 500 * time.Millisecond},
		append(fastRetry, kgo.RecordRetries(1), kgo.UnknownTopicRetries(1))...)
	require.NoError(t, err)
	defer sink.Close()

	b := memory.New(memory.Options{Partitions: 4})
	defer b.Close()
	ctx := context.Background()
	const keys, perKey = 40, 12
	var parkIDs []string
	for r := range perKey {
		tx := b.Begin()
		var es []outbox.Entry
		for k := range keys {
			es = append(es, outbox.Entry{
				ID: fmt.Sprintf("k%02d-%02d", k, r), Topic: "events", Key: fmt.Sprintf("key-%02d", k),
				Payload: []byte(strconv.Itoa(r)),
			})
		}
		if r == 3 {
			// Poison: an unknown topic and an oversize record, in the
			// middle of two keys' sequences.
			es = append(es,
				outbox.Entry{ID: "poison-topic", Topic: "no-such-topic", Key: "key-00", Payload: []byte("x")},
				outbox.Entry{ID: "poison-size", Topic: "events", Key: "key-01", Payload: randomBytes(20000)},
			)
			parkIDs = append(parkIDs, "poison-size", "poison-topic")
		}
		require.NoError(t, b.AppendInTx(ctx, tx, es...))
		require.NoError(t, tx.Commit())
	}

	relay, err := outbox.NewRelay(b, sink, outbox.RelayOptions{
		BatchSize:        64,
		PollInterval:     20 * time.Millisecond,
		LeaseTTL:         30 * time.Second, // above RenewMargin + the sink's landing bound (2s + 3s + 2s)
		Backoff:          backoff.Policy{Base: 20 * time.Millisecond, Max: 200 * time.Millisecond, MaxAttempts: -1},
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
		st, err := b.Stats(ctx)
		require.NoError(t, err)
		if st.Pending == 0 {
			break
		}
		require.True(t, time.Now().Before(deadline), "entries still pending: %+v, relay %+v", st, relay.Stats())
		time.Sleep(50 * time.Millisecond)
	}

	parked, err := b.Parked(ctx, "", 10)
	require.NoError(t, err)
	var got []string
	for _, e := range parked {
		got = append(got, e.ID)
		assert.NotEmpty(t, e.LastError)
		if e.ID == "poison-topic" {
			assert.Contains(t, e.LastError, `topic "no-such-topic"`)
			assert.Contains(t, e.LastError, "UnknownTopicTimeout")
		}
	}
	assert.Equal(t, parkIDs, got)

	recs := consumeQuiet(t, c, []string{"events"}) // the relay is done: every record is there
	first := map[string]bool{}
	last := map[string]int{}
	dups := 0
	for _, rec := range recs {
		id := kafkasink.EntryID(rec)
		if first[id] {
			dups++
			continue
		}
		first[id] = true
		seq, err := strconv.Atoi(string(rec.Value))
		require.NoError(t, err, "record %s", id)
		key := string(rec.Key)
		if prev, ok := last[key]; ok {
			assert.Equal(t, prev+1, seq, "key %s: first deliveries out of order", key)
		} else {
			assert.Equal(t, 0, seq, "key %s starts at %d", key, seq)
		}
		last[key] = seq
	}
	assert.Len(t, first, keys*perKey, "every entry arrives")
	assert.NotContains(t, first, "poison-size")
	t.Logf("%d records, %d duplicates, relay stats %+v", len(recs), dups, relay.Stats())
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) { w.t.Log(string(p)); return len(p), nil }
