package kafkainbox_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/outboxrelay/outbox/inbox"
	"github.com/outboxrelay/outbox/sinks/kafka/kafkainbox"
)

// harness is one inbox store under the scenarios: an inbox over a fresh
// store, the handler that writes the effects, and the check of the
// effects.
type harness[Tx any] struct {
	ib *inbox.Inbox[Tx]
	h  inbox.Handler[Tx]
	// count is how many effects were applied so far.
	count func(t testing.TB) int
	// checkOnce fails t unless the effects are each of want exactly once,
	// each key's in its order.
	checkOnce func(t testing.TB, want []pub)
}

// memoryHarness runs the scenarios over the memory store.
func memoryHarness(t testing.TB) harness[*inbox.MemoryTx] {
	_, ib := newMemoryInbox(t)
	e := newEffects()
	return harness[*inbox.MemoryTx]{
		ib:        ib,
		h:         e.handler(),
		count:     func(testing.TB) int { return e.count() },
		checkOnce: e.checkOnce,
	}
}

// failOffsetCommits makes the broker refuse every offset commit of the
// group (a non-retryable error for each partition), as if each consumer
// crashed right after its store transaction committed and before its
// offsets reached Kafka.
func failOffsetCommits(c *kfake.Cluster, group string) *atomic.Int64 {
	var refused atomic.Int64
	c.ControlKey(int16(kmsg.OffsetCommit), func(kr kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		req := kr.(*kmsg.OffsetCommitRequest)
		if req.Group != group {
			return nil, nil, false
		}
		refused.Add(1)
		resp := req.ResponseKind().(*kmsg.OffsetCommitResponse)
		for _, rt := range req.Topics {
			st := kmsg.NewOffsetCommitResponseTopic()
			st.Topic = rt.Topic
			for _, rp := range rt.Partitions {
				sp := kmsg.NewOffsetCommitResponseTopicPartition()
				sp.Partition = rp.Partition
				sp.ErrorCode = kerr.OffsetMetadataTooLarge.Code
				st.Partitions = append(st.Partitions, sp)
			}
			resp.Topics = append(resp.Topics, st)
		}
		return resp, nil, true
	})
	return &refused
}

// crashScenario: a consumer applies the first 25 records of each of 4
// partitions, its offset commits to Kafka all failing, and is stopped
// while the next record keeps failing (a crash after its store commits
// and before any Kafka commit). A new consumer of the group resumes from
// the store's offsets: it applies the other 25 of each partition and sees
// no record twice (had it resumed from Kafka, which holds no commit, it
// would have read all 200 again: 100 duplicates).
func crashScenario[Tx any](t *testing.T, hs harness[Tx]) {
	const (
		topic, group = "orders", "billing"
		parts, per   = 4, 50
	)
	c := newCluster(t, parts, topic)
	refused := failOffsetCommits(c, group)
	var want []pub
	for p := range int32(parts) {
		for _, k := range []string{fmt.Sprintf("a%d", p), fmt.Sprintf("b%d", p)} {
			want = append(want, keyed(k, per/2, p)...)
		}
	}
	// Interleave the two keys of each partition.
	pubs := make([]pub, 0, len(want))
	for i := range per / 2 {
		for p := range parts {
			pubs = append(pubs, want[p*per+i], want[p*per+per/2+i])
		}
	}
	produce(t, newProducer(t, c), topic, pubs...)

	errCrash := errors.New("the consumer crashes here")
	first := func(ctx context.Context, tx Tx, m inbox.Message) error {
		if m.Data.(*kgo.Record).Offset >= per/2 {
			return errCrash
		}
		return hs.h(ctx, tx, m)
	}
	c1, err := kafkainbox.NewConsumer(hs.ib, first, kafkainbox.Options{
		Group: group, Topics: []string{topic}, MaxBatch: 1, Logger: quietLogger(),
	}, consumerOpts(c)...)
	require.NoError(t, err)
	stop1, _ := run(t, c1)
	waitFor(t, "the first consumer to apply 25 records of each partition and fail on the 26th", func() bool {
		return hs.count(t) == parts*per/2 && c1.Stats().Failures >= parts
	})
	stop1()
	require.Equal(t, int64(parts*per/2), c1.Stats().Applied)
	require.Positive(t, refused.Load(), "the consumer never tried to commit to Kafka")
	info := c.GroupInfo(group)
	require.NotNil(t, info)
	require.Empty(t, info.Commits, "Kafka holds commits of the group: the broker was to refuse them all")

	c2, err := kafkainbox.NewConsumer(hs.ib, hs.h, kafkainbox.Options{
		Group: group, Topics: []string{topic}, Logger: quietLogger(),
	}, consumerOpts(c)...)
	require.NoError(t, err)
	stop2, _ := run(t, c2)
	store := hs.ib.Store()
	waitFor(t, "the second consumer to reach the end of every partition", func() bool {
		got := storedOffsets(t, store, group, topic)
		return len(got) == parts && got[0] == per && got[1] == per && got[2] == per && got[3] == per
	})
	stop2()
	hs.checkOnce(t, want)
	s := c2.Stats()
	require.Equal(t, int64(parts*per/2), s.Applied)
	require.Zero(t, s.Duplicates, "the second consumer read records again: it did not resume from the store's offsets")
	require.Zero(t, s.Gaps)
}

// rebalanceScenario: 8 partitions, 16 keys, records produced while the
// group goes from 4 consumers to 2 and back to 4; every record applied
// exactly once, each key in order, no gap reported, and the duplicates
// the producer published (one in 16) skipped, no other record read twice.
func rebalanceScenario[Tx any](t *testing.T, hs harness[Tx], rounds int) {
	const (
		topic, group = "events", "projector"
		parts, keys  = 8, 16
		ahead        = 8 // rounds the producer may run ahead of the consumers
	)
	c := newCluster(t, parts, topic)
	opts := kafkainbox.Options{Group: group, Topics: []string{topic}, MaxBatch: 20, Logger: quietLogger()}
	type member struct {
		c    *kafkainbox.Consumer[Tx]
		stop func()
	}
	start := func() member {
		cons, err := kafkainbox.NewConsumer(hs.ib, hs.h, opts, consumerOpts(c)...)
		require.NoError(t, err)
		stop, _ := run(t, cons)
		return member{cons, stop}
	}

	var (
		want      []pub
		published atomic.Int64
		dups      int64
	)
	total := rounds * keys
	prod := newProducer(t, c)
	produced := make(chan struct{})
	begin := make(chan struct{}) // closed once the 4 consumers share the partitions
	// The producer stops after cut rounds until the two consumers that
	// join last share the partitions (rejoined), so that records are left
	// for them: two consumers alone may otherwise apply every record
	// before the group has rebalanced, and the check that every consumer
	// applied something (that the rebalances happened) would fail.
	cut := rounds * 7 / 10
	rejoined := make(chan struct{})
	go func() {
		defer close(produced)
		select {
		case <-begin:
		case <-t.Context().Done():
			return
		}
		for r := 1; r <= rounds; r++ {
			if r == cut+1 {
				select {
				case <-rejoined:
				case <-t.Context().Done():
					return
				}
			}
			for hs.count(t) < (r-ahead)*keys {
				if t.Context().Err() != nil {
					return
				}
				waitABit()
			}
			var batch []pub
			for k := range keys {
				p := pub{id: fmt.Sprintf("k%02d-%d", k, r), key: fmt.Sprintf("k%02d", k), seq: int64(r), partition: int32(k % parts)}
				batch = append(batch, p)
				want = append(want, p)
				if (r+k)%16 == 3 {
					batch = append(batch, p) // the producer publishes it twice
					dups++
				}
			}
			if err := prod.ProduceSync(context.Background(), records(topic, batch)...).FirstErr(); err != nil {
				t.Errorf("produce: %v", err)
				return
			}
			published.Add(int64(len(batch)))
		}
	}()

	stable := func(n int) {
		t.Helper()
		ctx, cancel := context.WithTimeout(t.Context(), watchdog)
		defer cancel()
		_, err := c.WaitGroupStable(ctx, group, n)
		require.NoError(t, err, "waiting for the group to be stable with %d members", n)
	}
	var members []member
	for range 4 {
		members = append(members, start())
	}
	stable(4)
	close(begin)
	waitFor(t, "a quarter of the records applied by 4 consumers", func() bool { return hs.count(t) >= total/4 })
	var wg sync.WaitGroup
	for _, m := range members[2:] {
		wg.Go(m.stop)
	}
	wg.Wait()
	stable(2)
	waitFor(t, "three fifths of the records applied by 2 consumers", func() bool { return hs.count(t) >= total*3/5 })
	members = append(members, start(), start())
	stable(4)
	close(rejoined)
	waitFor(t, "every record applied", func() bool { return hs.count(t) >= total })
	<-produced
	store := hs.ib.Store()
	waitFor(t, "every partition's stored offset at its end", func() bool {
		got := storedOffsets(t, store, group, topic)
		var sum int64
		for _, n := range got {
			sum += n
		}
		return sum == published.Load()
	})
	for _, m := range members {
		m.stop()
	}
	hs.checkOnce(t, want)
	var (
		sum kafkainbox.Stats
		per []int64
	)
	for i, m := range members {
		s := m.c.Stats()
		per = append(per, s.Applied)
		require.Positive(t, s.Applied, "consumer %d applied nothing: it was never given a partition", i)
		sum.Applied += s.Applied
		sum.Duplicates += s.Duplicates
		sum.Gaps += s.Gaps
	}
	t.Logf("%d records (%d published twice) over %d consumers (applied each: %v): %+v", total, dups, len(members), per, sum)
	require.Equal(t, int64(total), sum.Applied)
	require.Equal(t, dups, sum.Duplicates, "records read twice beyond the producer's duplicates: a partition did not resume from the store's offset")
	require.Zero(t, sum.Gaps)
}

func records(topic string, pubs []pub) []*kgo.Record {
	out := make([]*kgo.Record, len(pubs))
	for i, p := range pubs {
		out[i] = p.record(topic)
	}
	return out
}

// countingOffsets counts the completed Offsets calls of a store.
type countingOffsets[Tx any] struct {
	inbox.Store[Tx]
	calls atomic.Int64
}

func (s *countingOffsets[Tx]) Offsets(ctx context.Context, group, topic string) (map[int32]int64, error) {
	got, err := s.Store.Offsets(ctx, group, topic)
	s.calls.Add(1)
	return got, err
}

// zombieScenario: a consumer hangs in its handler, inside the transaction
// of a-4, past the group's rebalance timeout; the group gives both
// partitions to a second consumer, which reads the store's offset of
// partition 0 (3: a-4 is not committed). Then the first consumer wakes
// up and commits a-4 anyway (a zombie). The second consumer reads a-4
// too, and the inbox skips it as a duplicate: every record is applied
// exactly once, in order.
func zombieScenario[Tx any](t *testing.T, hs harness[Tx]) {
	const topic, group = "orders", "billing"
	c := newCluster(t, 2, topic)
	want := append(keyed("a", 10, 0), keyed("b", 10, 1)...)
	produce(t, newProducer(t, c), topic, want...)
	store := &countingOffsets[Tx]{Store: hs.ib.Store()}
	ib, err := inbox.New(inbox.Store[Tx](store), inbox.Options{Logger: quietLogger()})
	require.NoError(t, err)
	held, release := make(chan struct{}), make(chan struct{})
	var once atomic.Bool
	hang := func(ctx context.Context, tx Tx, m inbox.Message) error {
		if m.ID == "a-4" && once.CompareAndSwap(false, true) {
			close(held)
			<-release
		}
		return hs.h(ctx, tx, m)
	}
	opts := kafkainbox.Options{Group: group, Topics: []string{topic}, MaxBatch: 1, Logger: quietLogger()}
	kopts := append(consumerOpts(c), kgo.RebalanceTimeout(time.Second))
	a, err := kafkainbox.NewConsumer(ib, hang, opts, kopts...)
	require.NoError(t, err)
	stopA, _ := run(t, a)
	<-held
	require.Equal(t, int64(1), store.calls.Load())
	b, err := kafkainbox.NewConsumer(ib, hs.h, opts, kopts...)
	require.NoError(t, err)
	stopB, _ := run(t, b)
	waitFor(t, "the second consumer to read the stored offsets", func() bool { return store.calls.Load() >= 2 })
	close(release)
	waitFor(t, "every record applied", func() bool { return hs.count(t) >= len(want) })
	waitFor(t, "both partitions' stored offsets at their ends", func() bool {
		got := storedOffsets(t, hs.ib.Store(), group, topic)
		return got[0] == 10 && got[1] == 10
	})
	stopA()
	stopB()
	hs.checkOnce(t, want)
	sa, sb := a.Stats(), b.Stats()
	t.Logf("hung consumer %+v, second consumer %+v", sa, sb)
	require.Equal(t, int64(len(want)), sa.Applied+sb.Applied)
	require.GreaterOrEqual(t, sa.Duplicates+sb.Duplicates, int64(1), "a-4 was not read twice: the scenario did not happen")
}
