package kafkainbox_test

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outboxrelay/outbox"
	"github.com/outboxrelay/outbox/inbox"
	kafkasink "github.com/outboxrelay/outbox/sinks/kafka"
	"github.com/outboxrelay/outbox/sinks/kafka/kafkainbox"
)

// watchdog bounds every wait of these tests: it is not a timing
// assertion, only how long a stuck test waits before it fails.
const watchdog = 60 * time.Second

// newCluster starts an in-process kfake cluster with topic (partitions
// partitions), closed when the test ends.
func newCluster(t testing.TB, partitions int32, topic string) *kfake.Cluster {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(partitions, topic))
	require.NoError(t, err)
	t.Cleanup(c.Close)
	return c
}

// newProducer returns a client of c that produces each record to the
// partition it names, closed when the test ends.
func newProducer(t testing.TB, c *kfake.Cluster) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	require.NoError(t, err)
	t.Cleanup(cl.Close)
	return cl
}

// consumerOpts are the kgo options of the tests' consumers: quick
// heartbeats so that rebalances do not wait seconds, and short fetch
// waits so that a resumed partition is fetched soon.
func consumerOpts(c *kfake.Cluster) []kgo.Opt {
	return []kgo.Opt{
		kgo.SeedBrokers(c.ListenAddrs()...),
		kgo.FetchMaxWait(100 * time.Millisecond),
		kgo.HeartbeatInterval(100 * time.Millisecond),
	}
}

// pub is one record to produce: an outbox entry with its ID, key and
// per-key number (0: no outbox-key-seq header; an empty id: no outbox-id
// header).
type pub struct {
	id        string
	key       string
	seq       int64
	partition int32
}

func (p pub) record(topic string) *kgo.Record {
	r := &kgo.Record{Topic: topic, Partition: p.partition, Key: []byte(p.key), Value: []byte("v-" + p.id)}
	if p.id != "" {
		r.Headers = append(r.Headers, kgo.RecordHeader{Key: kafkasink.DefaultIDHeader, Value: []byte(p.id)})
	}
	if p.seq > 0 {
		r.Headers = append(r.Headers, kgo.RecordHeader{Key: outbox.HeaderKeySeq, Value: []byte(strconv.FormatInt(p.seq, 10))})
	}
	return r
}

func produce(t testing.TB, cl *kgo.Client, topic string, pubs ...pub) {
	t.Helper()
	recs := make([]*kgo.Record, len(pubs))
	for i, p := range pubs {
		recs[i] = p.record(topic)
	}
	require.NoError(t, cl.ProduceSync(context.Background(), recs...).FirstErr())
}

// keyed is n entries of key k (numbered 1..n, IDs k-1..k-n) on partition.
func keyed(k string, n int, partition int32) []pub {
	out := make([]pub, n)
	for i := range out {
		out[i] = pub{id: fmt.Sprintf("%s-%d", k, i+1), key: k, seq: int64(i + 1), partition: partition}
	}
	return out
}

// effects are what the handlers applied, in commit order: the memory
// store's stand-in for an effect table.
type effects struct {
	mu    sync.Mutex
	byID  map[string]int
	byKey map[string][]int64
	total int
}

func newEffects() *effects {
	return &effects{byID: map[string]int{}, byKey: map[string][]int64{}}
}

func (e *effects) add(m inbox.Message) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.byID[m.ID]++
	e.byKey[m.Key] = append(e.byKey[m.Key], m.Seq)
	e.total++
}

// handler applies a message's effect when its memory transaction
// commits; it checks the record is in Data.
func (e *effects) handler() inbox.Handler[*inbox.MemoryTx] {
	return func(ctx context.Context, tx *inbox.MemoryTx, m inbox.Message) error {
		rec, ok := m.Data.(*kgo.Record)
		if !ok || kafkasink.EntryID(rec) != m.ID {
			return fmt.Errorf("message %q carries no record of its own: %#v", m.ID, m.Data)
		}
		tx.OnCommit(func() { e.add(m) })
		return nil
	}
}

func (e *effects) count() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.total
}

func (e *effects) applied(id string) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.byID[id]
}

// checkOnce fails t unless every id in want was applied exactly once and
// nothing else was, and each key's numbers were applied as 1, 2, 3, ...
func (e *effects) checkOnce(t testing.TB, want []pub) {
	t.Helper()
	e.mu.Lock()
	defer e.mu.Unlock()
	wantIDs := map[string]bool{}
	wantKeys := map[string]int64{}
	for _, p := range want {
		wantIDs[p.id] = true
		wantKeys[p.key] = max(wantKeys[p.key], p.seq)
	}
	var twice, missing, extra []string
	for id := range wantIDs {
		switch n := e.byID[id]; {
		case n == 0:
			missing = append(missing, id)
		case n > 1:
			twice = append(twice, fmt.Sprintf("%s×%d", id, n))
		}
	}
	for id := range e.byID {
		if !wantIDs[id] {
			extra = append(extra, id)
		}
	}
	slices.Sort(missing)
	slices.Sort(twice)
	require.Empty(t, missing, "entries never applied")
	require.Empty(t, twice, "entries applied more than once")
	require.Empty(t, extra, "effects of entries never published")
	require.Equal(t, len(wantIDs), e.total)
	for _, k := range slices.Sorted(maps.Keys(wantKeys)) {
		seqs := e.byKey[k]
		for i, s := range seqs {
			require.Equal(t, int64(i+1), s, "key %s applied out of order: %v", k, seqs)
		}
		require.Len(t, seqs, int(wantKeys[k]), "key %s", k)
	}
}

// run runs c until the test ends (or stop is called) and returns a
// channel with Run's result.
func run[Tx any](t testing.TB, c *kafkainbox.Consumer[Tx]) (stop func(), done <-chan error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	ch := make(chan error, 1)
	go func() { ch <- c.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-ch:
				require.NoError(t, err, "Run")
			case <-time.After(watchdog):
				t.Errorf("Run did not return within %v of its context's end", watchdog)
			}
		})
	}
	t.Cleanup(stop)
	return stop, ch
}

// waitFor waits until cond holds, failing t after the watchdog.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(watchdog)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waited %v for %s", watchdog, what)
		}
		waitABit()
	}
}

// waitABit is the pause of a polling wait.
func waitABit() { time.Sleep(5 * time.Millisecond) }

// quietLogger drops what it is given below level Error.
func quietLogger() *slog.Logger {
	return slog.New(slog.NewTextHandler(discard{}, &slog.HandlerOptions{Level: slog.LevelError}))
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }

// newMemoryInbox is an inbox over a fresh memory store.
func newMemoryInbox(t testing.TB) (*inbox.Memory, *inbox.Inbox[*inbox.MemoryTx]) {
	t.Helper()
	store := inbox.NewMemory()
	ib, err := inbox.New(store, inbox.Options{Logger: quietLogger()})
	require.NoError(t, err)
	return store, ib
}

// storedOffsets are the offsets the store holds for group and topic.
func storedOffsets[Tx any](t testing.TB, store inbox.Store[Tx], group, topic string) map[int32]int64 {
	t.Helper()
	got, err := store.Offsets(context.Background(), group, topic)
	require.NoError(t, err)
	return got
}
