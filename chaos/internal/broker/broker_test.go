package broker_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outboxrelay/outbox/chaos/internal/broker"
	kafkasink "github.com/outboxrelay/outbox/sinks/kafka"
)

var bin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "broker-test")
	if err != nil {
		panic(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	bin, err = broker.Build(ctx, "../../..", dir)
	cancel()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

const topic = "outbox"

func start(t *testing.T) *broker.Broker {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	b, err := broker.Start(ctx, bin, t.TempDir(), broker.Options{Partitions: 3, Topics: []string{topic}})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, b.Close()) })
	return b
}

type disconnects struct{ n atomic.Int64 }

func (d *disconnects) OnBrokerDisconnect(kgo.BrokerMetadata, net.Conn) { d.n.Add(1) }

func producer(t *testing.T, b *broker.Broker, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{
		kgo.SeedBrokers(strings.Split(b.Brokers(), ",")...),
		kgo.DefaultProduceTopic(topic),
		kgo.RetryBackoffFn(func(int) time.Duration { return 20 * time.Millisecond }),
		kgo.MetadataMinAge(50 * time.Millisecond), // see the package doc
	}, opts...)...)
	require.NoError(t, err)
	t.Cleanup(cl.Close)
	return cl
}

func record(id string) *kgo.Record {
	return &kgo.Record{Key: []byte("k-" + id), Value: []byte(id), Headers: []kgo.RecordHeader{{Key: kafkasink.DefaultIDHeader, Value: []byte(id)}}}
}

func TestConsumeReturnsEveryRecordInOffsetOrder(t *testing.T) {
	t.Parallel()
	b := start(t)
	cl := producer(t, b)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var recs []*kgo.Record
	for i := range 100 {
		recs = append(recs, record(fmt.Sprintf("id-%03d", i)))
	}
	recs = append(recs, &kgo.Record{Key: []byte("foreign"), Value: []byte("no header")})
	before := time.Now()
	require.NoError(t, cl.ProduceSync(ctx, recs...).FirstErr())

	ds, err := b.Consume(ctx, topic)
	require.NoError(t, err)
	require.Len(t, ds, 101)
	next := map[int32]int64{}
	ids := map[string]bool{}
	for _, d := range ds {
		require.Equal(t, topic, d.Topic)
		require.Equal(t, next[d.Partition], d.Offset, "offsets in order without gaps")
		next[d.Partition]++
		if d.ID == "" {
			require.Equal(t, "foreign", d.Key, "only the record without the header has no ID")
			continue
		}
		require.Equal(t, "k-"+d.ID, d.Key)
		require.False(t, ids[d.ID])
		ids[d.ID] = true
		require.WithinDuration(t, before, d.At, 10*time.Second)
	}
	require.Len(t, ids, 100)
	require.Greater(t, len(next), 1, "the records spread over partitions")

	// Records produced after the call are not waited for; a second call
	// sees them.
	require.NoError(t, cl.ProduceSync(ctx, record("late")).FirstErr())
	ds, err = b.Consume(ctx, topic)
	require.NoError(t, err)
	require.Len(t, ds, 102)
}

func TestConsumeOfAnEmptyOrUnknownTopic(t *testing.T) {
	t.Parallel()
	b := start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ds, err := b.Consume(ctx, topic)
	require.NoError(t, err)
	require.Empty(t, ds)
	_, err = b.Consume(ctx, "nope")
	require.ErrorIs(t, err, kerr.UnknownTopicOrPartition)
}

func TestFaults(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		run  func(t *testing.T, ctx context.Context, b *broker.Broker)
	}{
		{"FailProduceErrorsReachTheProducer", func(t *testing.T, ctx context.Context, b *broker.Broker) {
			cl := producer(t, b, kgo.RecordRetries(1))
			require.NoError(t, b.FailProduce(ctx, 3, "NOT_ENOUGH_REPLICAS"))
			require.ErrorIs(t, cl.ProduceSync(ctx, record("a")).FirstErr(), kerr.NotEnoughReplicas)
			require.NoError(t, b.Reset(ctx))
			require.NoError(t, cl.ProduceSync(ctx, record("b")).FirstErr())
			s, err := b.Stats(ctx)
			require.NoError(t, err)
			require.Equal(t, int64(2), s.Applied.ProduceErrors, "one try plus one retry")
			requireIDs(t, ctx, b, "b")
		}},
		{"FailProduceRetriedLandsOnce", func(t *testing.T, ctx context.Context, b *broker.Broker) {
			cl := producer(t, b)
			require.NoError(t, b.FailProduce(ctx, 2, "NOT_LEADER_FOR_PARTITION"))
			require.NoError(t, cl.ProduceSync(ctx, record("a")).FirstErr())
			requireIDs(t, ctx, b, "a")
		}},
		{"DelayProduceHoldsThenWrites", func(t *testing.T, ctx context.Context, b *broker.Broker) {
			cl := producer(t, b)
			require.NoError(t, cl.ProduceSync(ctx, record("warm-up")).FirstErr())
			const d = 700 * time.Millisecond
			require.NoError(t, b.DelayProduce(ctx, 1, d))
			start := time.Now()
			require.NoError(t, cl.ProduceSync(ctx, record("a")).FirstErr())
			require.GreaterOrEqual(t, time.Since(start), d)
			requireIDs(t, ctx, b, "warm-up", "a")
		}},
		{"DropConnectionsRecoversAndLandsOnce", func(t *testing.T, ctx context.Context, b *broker.Broker) {
			var d disconnects
			cl := producer(t, b, kgo.WithHooks(&d))
			require.NoError(t, b.DropConnections(ctx, 2))
			require.NoError(t, cl.ProduceSync(ctx, record("a")).FirstErr())
			require.GreaterOrEqual(t, d.n.Load(), int64(2))
			s, err := b.Stats(ctx)
			require.NoError(t, err)
			require.Equal(t, int64(2), s.Applied.DroppedConnections)
			requireIDs(t, ctx, b, "a")
		}},
		{"BadInputIsAnError", func(t *testing.T, ctx context.Context, b *broker.Broker) {
			require.ErrorContains(t, b.FailProduce(ctx, 1, "NOPE"), "not a Kafka error name")
			require.ErrorContains(t, b.DropConnections(ctx, 0), "400")
			require.ErrorContains(t, b.DelayProduce(ctx, 1, 0), "400")
		}},
		{"CloseAfterKill", func(t *testing.T, ctx context.Context, b *broker.Broker) {
			require.NoError(t, b.Proc().Kill())
			require.NoError(t, b.Close())
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			tc.run(t, ctx, start(t))
		})
	}
}

func requireIDs(t *testing.T, ctx context.Context, b *broker.Broker, want ...string) {
	t.Helper()
	ds, err := b.Consume(ctx, topic)
	require.NoError(t, err)
	var got []string
	for _, d := range ds {
		got = append(got, d.ID)
	}
	require.ElementsMatch(t, want, got)
}
