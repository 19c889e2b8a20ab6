package kafkainbox_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/outboxrelay/outbox/inbox"
	"github.com/outboxrelay/outbox/internal/testenv"
	"github.com/outboxrelay/outbox/sinks/kafka/kafkainbox"
)

func TestConsumerMemory(t *testing.T) {
	t.Parallel()
	t.Run("CrashBetweenStoreCommitAndKafkaCommit", func(t *testing.T) {
		t.Parallel()
		crashScenario(t, memoryHarness(t))
	})
	t.Run("RebalanceFourToTwoToFour", func(t *testing.T) {
		t.Parallel()
		rebalanceScenario(t, memoryHarness(t), 60)
	})
	t.Run("HungConsumerLosesItsPartitionsAndCommitsLate", func(t *testing.T) {
		t.Parallel()
		zombieScenario(t, memoryHarness(t))
	})
}

// Every record is applied once, each key in order, over several batches a
// partition, and the producer's duplicates are skipped.
func TestConsumerAppliesEachRecordOnceAndSkipsDuplicates(t *testing.T) {
	t.Parallel()
	const topic, group = "orders", "billing"
	c := newCluster(t, 4, topic)
	var want, pubs []pub
	for k := range 8 {
		recs := keyed(fmt.Sprintf("k%d", k), 25, int32(k%4))
		want = append(want, recs...)
		for i, p := range recs {
			pubs = append(pubs, p)
			if i%10 == 4 {
				pubs = append(pubs, p) // published twice
			}
		}
	}
	produce(t, newProducer(t, c), topic, pubs...)

	store, ib := newMemoryInbox(t)
	e := newEffects()
	cons, err := kafkainbox.NewConsumer(ib, e.handler(), kafkainbox.Options{
		Group: group, Topics: []string{topic}, MaxBatch: 7, Logger: quietLogger(),
	}, consumerOpts(c)...)
	require.NoError(t, err)
	stop, _ := run(t, cons)
	ends := map[int32]int64{0: 56, 1: 56, 2: 56, 3: 56} // 50 records and 6 copies each
	waitFor(t, "every partition's stored offset at its end", func() bool {
		return assert.ObjectsAreEqual(ends, storedOffsets(t, store, group, topic))
	})
	stop()
	e.checkOnce(t, want)
	s := cons.Stats()
	require.Equal(t, int64(200), s.Applied)
	require.Equal(t, int64(24), s.Duplicates)
	require.Zero(t, s.Gaps)
	require.Zero(t, s.Failures)
	require.GreaterOrEqual(t, s.Batches, int64(4*56/7))

	// The handled offsets reached Kafka too (committed when the consumer
	// left the group), for lag monitors.
	info := c.GroupInfo(group)
	require.NotNil(t, info)
	for p, end := range ends {
		require.Equal(t, end, info.Commits[topic][p].Offset, "Kafka commit of partition %d", p)
	}
}

// With DisableKafkaCommit the group has no commits in Kafka.
func TestConsumerDisableKafkaCommit(t *testing.T) {
	t.Parallel()
	const topic, group = "orders", "quiet"
	c := newCluster(t, 2, topic)
	want := append(keyed("a", 5, 0), keyed("b", 5, 1)...)
	produce(t, newProducer(t, c), topic, want...)
	store, ib := newMemoryInbox(t)
	e := newEffects()
	cons, err := kafkainbox.NewConsumer(ib, e.handler(), kafkainbox.Options{
		Group: group, Topics: []string{topic}, DisableKafkaCommit: true, Logger: quietLogger(),
	}, consumerOpts(c)...)
	require.NoError(t, err)
	stop, _ := run(t, cons)
	waitFor(t, "both partitions handled", func() bool {
		got := storedOffsets(t, store, group, topic)
		return got[0] == 5 && got[1] == 5
	})
	stop()
	e.checkOnce(t, want)
	info := c.GroupInfo(group)
	require.NotNil(t, info)
	require.Empty(t, info.Commits)
}

// A partition starts at the store's offset, or at the start when the store
// has none, whatever the group committed in Kafka (here: past the end of
// partition 0, the start of partition 1, the middle of partition 2).
func TestConsumerResumesFromTheStoreNotFromKafkaCommits(t *testing.T) {
	t.Parallel()
	const topic, group = "orders", "billing"
	c := newCluster(t, 3, topic)
	var pubs []pub
	for p := range int32(3) {
		pubs = append(pubs, keyed(fmt.Sprintf("k%d", p), 10, p)...)
	}
	prod := newProducer(t, c)
	produce(t, prod, topic, pubs...)

	// Kafka's commits, which must not be read back.
	req := kmsg.NewPtrOffsetCommitRequest()
	req.Group = group
	req.Generation = -1
	rt := kmsg.NewOffsetCommitRequestTopic()
	rt.Topic = topic
	rt.TopicID = c.TopicInfo(topic).TopicID
	for p, at := range map[int32]int64{0: 10, 1: 0, 2: 5} {
		rp := kmsg.NewOffsetCommitRequestTopicPartition()
		rp.Partition, rp.Offset, rp.LeaderEpoch = p, at, -1
		rt.Partitions = append(rt.Partitions, rp)
	}
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(context.Background(), prod)
	require.NoError(t, err)
	for _, t2 := range resp.Topics {
		for _, p := range t2.Partitions {
			require.Zero(t, p.ErrorCode, "committing partition %d", p.Partition)
		}
	}

	store, ib := newMemoryInbox(t)
	require.NoError(t, store.InTx(context.Background(), func(ctx context.Context, tx *inbox.MemoryTx) error {
		return store.SaveOffsets(ctx, tx, []inbox.Offset{
			{Group: group, Topic: topic, Partition: 0, Next: 4},
			{Group: group, Topic: topic, Partition: 1, Next: 7},
			{Group: "another", Topic: topic, Partition: 2, Next: 9},
		})
	}))
	e := newEffects()
	cons, err := kafkainbox.NewConsumer(ib, e.handler(), kafkainbox.Options{
		Group: group, Topics: []string{topic}, Logger: quietLogger(),
	}, consumerOpts(c)...)
	require.NoError(t, err)
	stop, _ := run(t, cons)
	waitFor(t, "every partition handled to its end", func() bool {
		got := storedOffsets(t, store, group, topic)
		return got[0] == 10 && got[1] == 10 && got[2] == 10
	})
	stop()
	var want []pub
	for p, from := range []int{4, 7, 0} {
		want = append(want, pubs[p*10+from:p*10+10]...)
	}
	e.mu.Lock()
	require.Len(t, e.byID, len(want))
	for _, p := range want {
		require.Equal(t, 1, e.byID[p.id], p.id)
	}
	e.mu.Unlock()
	require.Equal(t, int64(6+3+10), cons.Stats().Applied)
	require.Zero(t, cons.Stats().Duplicates)
}

// A failing batch is tried again, with a log line per attempt, without
// skipping it or anything after it in its partition, while the other
// partition goes on; once the handler recovers, everything is applied
// once, in order.
func TestConsumerRetriesAFailedBatchWithoutSkipping(t *testing.T) {
	t.Parallel()
	const topic, group = "orders", "billing"
	c := newCluster(t, 2, topic)
	want := append(keyed("a", 10, 0), keyed("b", 10, 1)...)
	produce(t, newProducer(t, c), topic, want...)
	store, ib := newMemoryInbox(t)
	e := newEffects()
	var broken atomic.Bool
	broken.Store(true)
	h := func(ctx context.Context, tx *inbox.MemoryTx, m inbox.Message) error {
		if m.ID == "a-4" && broken.Load() {
			return errors.New("the handler cannot apply a-4 yet")
		}
		return e.handler()(ctx, tx, m)
	}
	logs := &testenv.LogCapture{}
	cons, err := kafkainbox.NewConsumer(ib, h, kafkainbox.Options{
		Group: group, Topics: []string{topic}, MaxBatch: 1, Logger: slog.New(logs),
		RetryBackoff: 1, MaxRetryBackoff: 20_000_000, // 1ns doubling to 20ms
	}, consumerOpts(c)...)
	require.NoError(t, err)
	stop, _ := run(t, cons)
	waitFor(t, "partition 1 handled and a-4 failed 3 times", func() bool {
		return storedOffsets(t, store, group, topic)[1] == 10 && cons.Stats().Failures >= 3
	})
	require.Equal(t, int64(3), storedOffsets(t, store, group, topic)[0])
	for _, p := range want {
		applied := p.key == "b" || p.seq < 4
		require.Equal(t, applied, e.applied(p.id) == 1, "%s applied", p.id)
	}

	broken.Store(false)
	waitFor(t, "partition 0 handled", func() bool { return storedOffsets(t, store, group, topic)[0] == 10 })
	stop()
	e.checkOnce(t, want)
	failed := logs.Attrs(slog.LevelWarn, func(msg string) bool { return strings.HasPrefix(msg, "kafkainbox: a batch failed") })
	require.Len(t, failed, int(cons.Stats().Failures), logs.String())
	for i, a := range failed {
		require.Equal(t, "0", a["partition"])
		require.Equal(t, "3", a["offset"])
		require.Equal(t, strconv.Itoa(i+1), a["attempt"])
		require.Contains(t, a["err"], "cannot apply a-4")
	}
}

// A record without an outbox-id is not skipped: its partition stops there
// and, with MaxAttempts, Run returns a BatchError naming it; the records
// before it are applied and the stored offset is its own.
func TestConsumerRecordWithoutIDStopsRunAfterMaxAttempts(t *testing.T) {
	t.Parallel()
	const topic, group = "orders", "billing"
	c := newCluster(t, 1, topic)
	produce(t, newProducer(t, c), topic,
		pub{id: "a-1", key: "a", seq: 1}, pub{id: "a-2", key: "a", seq: 2},
		pub{key: "a"}, pub{id: "a-3", key: "a", seq: 3})
	store, ib := newMemoryInbox(t)
	e := newEffects()
	cons, err := kafkainbox.NewConsumer(ib, e.handler(), kafkainbox.Options{
		Group: group, Topics: []string{topic}, MaxAttempts: 3, RetryBackoff: 1, Logger: quietLogger(),
	}, consumerOpts(c)...)
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { done <- cons.Run(context.Background()) }()
	var runErr error
	waitFor(t, "Run to give up", func() bool {
		select {
		case runErr = <-done:
			return true
		default:
			return false
		}
	})
	var be *kafkainbox.BatchError
	require.ErrorAs(t, runErr, &be)
	require.Equal(t, kafkainbox.BatchError{Topic: topic, Partition: 0, Offset: 2, Attempts: 3, Err: be.Err}, *be)
	require.ErrorIs(t, runErr, inbox.ErrInvalidMessage)
	require.Contains(t, runErr.Error(), "orders[0] at offset 2 has no outbox-id header")
	require.Equal(t, map[int32]int64{0: 2}, storedOffsets(t, store, group, topic))
	require.Equal(t, 1, e.applied("a-1"))
	require.Equal(t, 1, e.applied("a-2"))
	require.Zero(t, e.applied("a-3"))
	require.Equal(t, int64(3), cons.Stats().Failures)
	require.ErrorContains(t, cons.Run(context.Background()), "Run was called before")
}

// A key whose numbers jump is reported as a gap (and applied, the
// default policy).
func TestConsumerReportsGaps(t *testing.T) {
	t.Parallel()
	const topic, group = "orders", "billing"
	c := newCluster(t, 1, topic)
	want := []pub{{id: "g-1", key: "g", seq: 1}, {id: "g-2", key: "g", seq: 2}, {id: "g-5", key: "g", seq: 5}, {id: "g-6", key: "g", seq: 6}}
	produce(t, newProducer(t, c), topic, want...)
	store := inbox.NewMemory()
	logs := &testenv.LogCapture{}
	ib, err := inbox.New(store, inbox.Options{Logger: slog.New(logs)})
	require.NoError(t, err)
	e := newEffects()
	cons, err := kafkainbox.NewConsumer(ib, e.handler(), kafkainbox.Options{Group: group, Topics: []string{topic}, Logger: quietLogger()}, consumerOpts(c)...)
	require.NoError(t, err)
	stop, _ := run(t, cons)
	waitFor(t, "the partition handled", func() bool { return storedOffsets(t, store, group, topic)[0] == 4 })
	stop()
	require.Equal(t, kafkainbox.Stats{Applied: 4, Gaps: 1, Batches: cons.Stats().Batches}, cons.Stats())
	e.mu.Lock()
	defer e.mu.Unlock()
	require.Equal(t, []int64{1, 2, 5, 6}, e.byKey["g"])
	gaps := logs.Attrs(slog.LevelWarn, func(m string) bool { return strings.HasPrefix(m, "inbox: sequence gap") })
	require.Len(t, gaps, 1, logs.String())
	require.Equal(t, "g-5", gaps[0]["id"])
	require.Equal(t, "g", gaps[0]["key"])
	require.Equal(t, "3", gaps[0]["missing_from"])
	require.Equal(t, "4", gaps[0]["missing_to"])
}

func TestNewConsumerRejectsBadArguments(t *testing.T) {
	t.Parallel()
	_, ib := newMemoryInbox(t)
	h := newEffects().handler()
	for name, tc := range map[string]struct {
		ib   *inbox.Inbox[*inbox.MemoryTx]
		h    inbox.Handler[*inbox.MemoryTx]
		opts kafkainbox.Options
		want string
	}{
		"NoInbox":            {nil, h, kafkainbox.Options{Group: "g", Topics: []string{"t"}}, "needs an inbox"},
		"NoHandler":          {ib, nil, kafkainbox.Options{Group: "g", Topics: []string{"t"}}, "and a handler"},
		"NoGroup":            {ib, h, kafkainbox.Options{Topics: []string{"t"}}, "Options.Group is required"},
		"NoTopics":           {ib, h, kafkainbox.Options{Group: "g"}, "Options.Topics"},
		"EmptyTopic":         {ib, h, kafkainbox.Options{Group: "g", Topics: []string{"t", ""}}, "none empty"},
		"NegativeMaxBatch":   {ib, h, kafkainbox.Options{Group: "g", Topics: []string{"t"}, MaxBatch: -1}, "must not be negative"},
		"NegativeAttempts":   {ib, h, kafkainbox.Options{Group: "g", Topics: []string{"t"}, MaxAttempts: -1}, "must not be negative"},
		"BackoffCapTooSmall": {ib, h, kafkainbox.Options{Group: "g", Topics: []string{"t"}, RetryBackoff: 2, MaxRetryBackoff: 1}, "MaxRetryBackoff"},
		"NegativeRetention":  {ib, h, kafkainbox.Options{Group: "g", Topics: []string{"t"}, Retention: -1}, "Retention and JanitorInterval"},
		"NegativeInterval":   {ib, h, kafkainbox.Options{Group: "g", Topics: []string{"t"}, Retention: 1, JanitorInterval: -1}, "Retention and JanitorInterval"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			_, err := kafkainbox.NewConsumer(tc.ib, tc.h, tc.opts, kgo.SeedBrokers("127.0.0.1:1"))
			require.ErrorIs(t, err, inbox.ErrInvalidArgument)
			require.ErrorContains(t, err, tc.want)
			require.True(t, strings.HasPrefix(err.Error(), "kafkainbox: "), err.Error())
		})
	}
	var zero *kafkainbox.Consumer[*inbox.MemoryTx]
	require.ErrorContains(t, zero.Run(context.Background()), "NewConsumer")
}

// flakyOffsets is a memory store whose Offsets fails its first calls.
type flakyOffsets struct {
	*inbox.Memory
	failures atomic.Int64
}

func (s *flakyOffsets) Offsets(ctx context.Context, group, topic string) (map[int32]int64, error) {
	if s.failures.Add(-1) >= 0 {
		return nil, errors.New("the store is not reachable")
	}
	return s.Memory.Offsets(ctx, group, topic)
}

// When the store's offsets cannot be read at assignment, the consumer
// does not fall back to the group's commit in Kafka (here past the
// records, which would skip them): kgo joins again and asks again.
func TestConsumerDoesNotConsumeWhenTheStoredOffsetsCannotBeRead(t *testing.T) {
	t.Parallel()
	const topic, group = "orders", "billing"
	c := newCluster(t, 1, topic)
	want := keyed("a", 5, 0)
	prod := newProducer(t, c)
	produce(t, prod, topic, want...)
	req := kmsg.NewPtrOffsetCommitRequest()
	req.Group, req.Generation = group, -1
	rt := kmsg.NewOffsetCommitRequestTopic()
	rt.Topic, rt.TopicID = topic, c.TopicInfo(topic).TopicID
	rp := kmsg.NewOffsetCommitRequestTopicPartition()
	rp.Partition, rp.Offset, rp.LeaderEpoch = 0, 5, -1
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(context.Background(), prod)
	require.NoError(t, err)
	require.Zero(t, resp.Topics[0].Partitions[0].ErrorCode)

	store := &flakyOffsets{Memory: inbox.NewMemory()}
	store.failures.Store(2)
	ib, err := inbox.New(inbox.Store[*inbox.MemoryTx](store), inbox.Options{Logger: quietLogger()})
	require.NoError(t, err)
	e := newEffects()
	logs := &testenv.LogCapture{}
	cons, err := kafkainbox.NewConsumer(ib, e.handler(), kafkainbox.Options{Group: group, Topics: []string{topic}, Logger: slog.New(logs)}, consumerOpts(c)...)
	require.NoError(t, err)
	stop, _ := run(t, cons)
	waitFor(t, "the partition handled", func() bool { return storedOffsets(t, store.Memory, group, topic)[0] == 5 })
	stop()
	e.checkOnce(t, want)
	require.Less(t, store.failures.Load(), int64(0), "Offsets was not called again after failing")
	require.Len(t, logs.Attrs(slog.LevelWarn, func(m string) bool { return strings.HasPrefix(m, "kafkainbox: reading the stored offsets failed") }), 2, logs.String())
}

// When a member joins while the poll is being handled, the partitions
// stop after the batch in flight (which commits) and are rewound, so the
// rebalance does not wait for the whole poll; the new owner resumes from
// the store: nothing is applied twice or read twice. (Whether the second
// consumer applies anything depends on how fast the first one handles
// its next poll before the cooperative rebalance's second phase.)
func TestConsumerYieldsToAWaitingRebalance(t *testing.T) {
	t.Parallel()
	const topic, group = "orders", "billing"
	c := newCluster(t, 4, topic)
	var want []pub
	for p := range int32(4) {
		want = append(want, keyed(fmt.Sprintf("k%d", p), 20, p)...)
	}
	produce(t, newProducer(t, c), topic, want...)
	_, ib := newMemoryInbox(t)
	e := newEffects()
	held := make(chan struct{})
	release := make(chan struct{})
	var once atomic.Bool
	h := func(ctx context.Context, tx *inbox.MemoryTx, m inbox.Message) error {
		if once.CompareAndSwap(false, true) {
			close(held)
			<-release
		}
		return e.handler()(ctx, tx, m)
	}
	opts := kafkainbox.Options{Group: group, Topics: []string{topic}, MaxBatch: 1, Logger: quietLogger()}
	a, err := kafkainbox.NewConsumer(ib, h, opts, consumerOpts(c)...)
	require.NoError(t, err)
	stopA, _ := run(t, a)
	<-held
	b, err := kafkainbox.NewConsumer(ib, h, opts, consumerOpts(c)...)
	require.NoError(t, err)
	stopB, _ := run(t, b)
	waitFor(t, "kgo to signal the rebalance waiting for the first consumer's poll", a.RebalanceWaiting)
	close(release)
	waitFor(t, "every record applied", func() bool { return e.count() == len(want) })
	ctx, cancel := context.WithTimeout(t.Context(), watchdog)
	defer cancel()
	_, err = c.WaitGroupStable(ctx, group, 2)
	require.NoError(t, err)
	stopA()
	stopB()
	e.checkOnce(t, want)
	sa, sb := a.Stats(), b.Stats()
	require.Positive(t, sa.Yielded, "the first consumer did not stop its partitions for the rebalance")
	require.Equal(t, int64(len(want)), sa.Applied+sb.Applied)
	require.Zero(t, sa.Duplicates+sb.Duplicates)
}

// The records of an aborted transaction (the Kafka sink's transactional
// mode, when a relay's transaction fails) are not applied: the consumer
// reads committed records only.
func TestConsumerSkipsAbortedTransactions(t *testing.T) {
	t.Parallel()
	const topic, group = "orders", "billing"
	c := newCluster(t, 1, topic)
	txn, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.TransactionalID("relay-0"))
	require.NoError(t, err)
	defer txn.Close()
	ctx := context.Background()
	inTxn := func(commit kgo.TransactionEndTry, pubs ...pub) {
		t.Helper()
		require.NoError(t, txn.BeginTransaction())
		require.NoError(t, txn.ProduceSync(ctx, records(topic, pubs)...).FirstErr())
		require.NoError(t, txn.EndTransaction(ctx, commit))
	}
	inTxn(kgo.TryCommit, pub{id: "a-1", key: "a", seq: 1})
	inTxn(kgo.TryAbort, pub{id: "a-2", key: "a", seq: 2}, pub{id: "aborted", key: "x", seq: 1})
	inTxn(kgo.TryCommit, pub{id: "a-2", key: "a", seq: 2}, pub{id: "a-3", key: "a", seq: 3})

	store, ib := newMemoryInbox(t)
	e := newEffects()
	cons, err := kafkainbox.NewConsumer(ib, e.handler(), kafkainbox.Options{Group: group, Topics: []string{topic}, Logger: quietLogger()}, consumerOpts(c)...)
	require.NoError(t, err)
	stop, _ := run(t, cons)
	// 3 committed records, 2 aborted ones, 3 transaction markers.
	waitFor(t, "the partition handled to its end", func() bool { return storedOffsets(t, store, group, topic)[0] >= 7 })
	stop()
	e.checkOnce(t, []pub{{id: "a-1", key: "a", seq: 1}, {id: "a-2", key: "a", seq: 2}, {id: "a-3", key: "a", seq: 3}})
	require.Equal(t, kafkainbox.Stats{Applied: 3, Batches: cons.Stats().Batches}, cons.Stats())
}
