package kafkainbox_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/outboxrelay/outbox/inbox"
	"github.com/outboxrelay/outbox/internal/effectlog"
	"github.com/outboxrelay/outbox/sinks/kafka/kafkainbox"
)

// member is one consumer of the janitor test: its own inbox (over the
// shared store) with its own meter, and the partitions it handled.
type member struct {
	name  string
	meter effectlog.Meter
	c     *kafkainbox.Consumer[*inbox.MemoryTx]
	stop  func()

	mu   sync.Mutex
	seen map[string]bool // "topic/partition" of the records it applied
}

func newMember(t *testing.T, name string, store *inbox.Memory, c *kfake.Cluster, opts kafkainbox.Options, kopts ...kgo.Opt) *member {
	t.Helper()
	m := &member{name: name, meter: effectlog.NewMeter(), seen: map[string]bool{}}
	ib, err := inbox.New(store, inbox.Options{Logger: quietLogger(), MeterProvider: m.meter.Provider})
	require.NoError(t, err)
	h := func(_ context.Context, tx *inbox.MemoryTx, msg inbox.Message) error {
		r := msg.Data.(*kgo.Record)
		tx.OnCommit(func() {
			m.mu.Lock()
			m.seen[fmt.Sprintf("%s/%d", r.Topic, r.Partition)] = true
			m.mu.Unlock()
		})
		return nil
	}
	m.c, err = kafkainbox.NewConsumer(ib, h, opts, append(consumerOpts(c), kopts...)...)
	require.NoError(t, err)
	m.stop, _ = run(t, m.c)
	return m
}

func (m *member) handled(tp string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.seen[tp]
}

func (m *member) running() bool {
	_, r := m.c.JanitorsStarted()
	return r
}

// purgedIDs is the member's outbox.inbox.purged of kind id (0 when its
// janitor never ran).
func (m *member) purgedIDs(t *testing.T) int64 { return m.meter.PurgedIDs(t) }

// The janitor (Options.Retention) runs only on the member holding
// partition 0 of the first topic: two members of a group over one store,
// each with its own meter; the old records are removed by the holder
// alone, the other never purges (its outbox.inbox.purged stays 0 and it
// exports no outbox.inbox.oldest_age); when the holder leaves, the other
// gets partition 0 and its janitor takes over.
func TestConsumerJanitorRunsOnlyOnTheHolderOfPartitionZero(t *testing.T) {
	t.Parallel()
	const group = "billing"
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(2, "orders", "audit"))
	require.NoError(t, err)
	t.Cleanup(c.Close)
	store := inbox.NewMemory()
	opts := kafkainbox.Options{Group: group, Topics: []string{"orders", "audit"}, Retention: time.Hour, JanitorInterval: 20 * time.Millisecond, Logger: quietLogger()}
	a := newMember(t, "a", store, c, opts)
	b := newMember(t, "b", store, c, opts)
	ctx, cancel := context.WithTimeout(t.Context(), watchdog)
	defer cancel()
	_, err = c.WaitGroupStable(ctx, group, 2)
	require.NoError(t, err)
	waitFor(t, "exactly one janitor running", func() bool { return a.running() != b.running() })
	holder, other := a, b
	if b.running() {
		holder, other = b, a
	}

	// The holder is the member that handles orders/0. Partition 0 of the
	// second topic, audit/0, does not count: when the other member holds
	// it, it still runs no janitor (exactly one runs, above).
	produce(t, newProducer(t, c), "orders", pub{id: "probe-0", partition: 0}, pub{id: "probe-1", partition: 1})
	produce(t, newProducer(t, c), "audit", pub{id: "probe-a0", partition: 0}, pub{id: "probe-a1", partition: 1})
	waitFor(t, "orders/0 handled", func() bool { return a.handled("orders/0") || b.handled("orders/0") })
	require.True(t, holder.handled("orders/0"), "member %s runs the janitor, but %s handled orders/0", holder.name, other.name)

	effectlog.OldRecords(t, store, "old", 50)
	waitFor(t, "the holder's janitor to remove the 50 old records", func() bool { return holder.purgedIDs(t) == 50 })
	require.Zero(t, other.purgedIDs(t), "member %s, without orders/0, purged", other.name)
	require.False(t, other.running())
	require.True(t, holder.meter.ExportsOldest(t), "the holder exports %s", inbox.MetricOldestAge)
	require.False(t, other.meter.ExportsOldest(t), "member %s, without a janitor, exports %s", other.name, inbox.MetricOldestAge)

	holder.stop()
	require.False(t, holder.running(), "the janitor of a stopped Run")
	waitFor(t, "the other member's janitor to take over", other.running)
	effectlog.OldRecords(t, store, "older", 30)
	waitFor(t, "the new holder's janitor to remove the 30 old records", func() bool { return other.purgedIDs(t) == 30 })
	require.Equal(t, int64(50), holder.purgedIDs(t), "the stopped member purged after it stopped")
}

// Partition 0 of a topic other than the first does not make a janitor
// run: with the round-robin balancer over audit (3 partitions) and orders
// (2), sorted audit/0, audit/1, audit/2, orders/0, orders/1, one member
// gets audit/0 and the other orders/0; only the one with orders/0 (the
// first of Options.Topics) runs the janitor and purges.
func TestConsumerJanitorFollowsTheFirstTopicOnly(t *testing.T) {
	t.Parallel()
	const group = "billing"
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(3, "audit"))
	require.NoError(t, err)
	t.Cleanup(c.Close)
	adm, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	require.NoError(t, err)
	t.Cleanup(adm.Close)
	ctx, cancel := context.WithTimeout(t.Context(), watchdog)
	defer cancel()
	req := kmsg.NewPtrCreateTopicsRequest()
	rt := kmsg.NewCreateTopicsRequestTopic()
	rt.Topic, rt.NumPartitions, rt.ReplicationFactor = "orders", 2, 1
	req.Topics = append(req.Topics, rt)
	_, err = req.RequestWith(ctx, adm)
	require.NoError(t, err)

	store := inbox.NewMemory()
	opts := kafkainbox.Options{Group: group, Topics: []string{"orders", "audit"}, Retention: time.Hour, JanitorInterval: 20 * time.Millisecond, Logger: quietLogger()}
	rr := kgo.Balancers(kgo.RoundRobinBalancer())
	a := newMember(t, "a", store, c, opts, rr)
	b := newMember(t, "b", store, c, opts, rr)
	_, err = c.WaitGroupStable(ctx, group, 2)
	require.NoError(t, err)
	produce(t, newProducer(t, c), "orders", pub{id: "probe-0", partition: 0})
	produce(t, newProducer(t, c), "audit", pub{id: "probe-a0", partition: 0})
	handledBy := func(tp string) *member {
		var m *member
		waitFor(t, tp+" handled", func() bool {
			switch {
			case a.handled(tp):
				m = a
			case b.handled(tp):
				m = b
			}
			return m != nil
		})
		return m
	}
	holder, auditHolder := handledBy("orders/0"), handledBy("audit/0")
	require.NotSame(t, holder, auditHolder, "the round-robin balancer gave orders/0 and audit/0 to one member")
	waitFor(t, "the holder of orders/0 running the janitor", holder.running)
	effectlog.OldRecords(t, store, "old", 20)
	waitFor(t, "the janitor to remove the 20 old records", func() bool { return holder.purgedIDs(t) == 20 })
	require.False(t, auditHolder.running(), "the member holding audit/0 runs a janitor")
	require.Zero(t, auditHolder.purgedIDs(t), "the member holding audit/0 purged")
}

// Without Options.Retention no janitor runs, whatever the assignment.
func TestConsumerWithoutRetentionRunsNoJanitor(t *testing.T) {
	t.Parallel()
	const topic, group = "orders", "billing"
	c := newCluster(t, 1, topic)
	store := inbox.NewMemory()
	m := newMember(t, "a", store, c, kafkainbox.Options{Group: group, Topics: []string{topic}, Logger: quietLogger()})
	produce(t, newProducer(t, c), topic, pub{id: "probe", partition: 0})
	waitFor(t, "orders/0 handled", func() bool { return m.handled("orders/0") })
	effectlog.OldRecords(t, store, "old", 5)
	started, running := m.c.JanitorsStarted()
	require.Zero(t, started)
	require.False(t, running)
	_, ok, err := store.Oldest(context.Background())
	require.NoError(t, err)
	require.True(t, ok, "records removed without a janitor")
	require.Zero(t, m.purgedIDs(t))
}
