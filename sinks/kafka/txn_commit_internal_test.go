package kafkasink

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outboxrelay/outbox"
)

// lateListClient stands in for a transactional *kgo.Client whose
// producer state lists a topic's partitions only some time after the
// first records produced to the topic were acknowledged (kgo stores them
// after partitioning the records that waited for the topic's metadata,
// and a descheduled goroutine can store them after the acknowledgement;
// TestStaleRelayFencedAtHandoff failed so under load). Its
// EndTransaction(TryCommit) follows franz-go v1.22.3's: when no
// partition it lists was produced to in the transaction, but records
// were produced, it aborts and returns nil.
type lateListClient struct {
	mu sync.Mutex
	// listedAfter is how many PartitionLeader calls see the partition
	// unlisted (-1: never listed).
	listedAfter int
	calls       int
	produced    map[string]bool // topic/partition of the transaction's records
	ends        []string        // "commit" or "abort", as sent to the broker
}

func (c *lateListClient) listed() bool {
	return c.listedAfter >= 0 && c.calls > c.listedAfter
}

func (c *lateListClient) BeginTransaction() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.produced = map[string]bool{}
	return nil
}

func (c *lateListClient) Produce(_ context.Context, r *kgo.Record, promise func(*kgo.Record, error)) {
	c.mu.Lock()
	r.Partition = 0
	c.produced[r.Topic] = true
	c.mu.Unlock()
	go promise(r, nil) // acknowledged
}

func (c *lateListClient) PartitionLeader(topic string, partition int32) (int32, int32, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.calls++
	if !c.listed() {
		return -1, -1, nil
	}
	return 0, 0, nil
}

func (c *lateListClient) EndTransaction(_ context.Context, commit kgo.TransactionEndTry) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.produced) == 0 {
		return nil
	}
	c.produced = nil
	if commit == kgo.TryCommit && !c.listed() {
		commit = kgo.TryAbort // kgo's !anyAdded path: an abort, and nil
	}
	if commit == kgo.TryCommit {
		c.ends = append(c.ends, "commit")
	} else {
		c.ends = append(c.ends, "abort")
	}
	return nil
}

func (c *lateListClient) Close() {}

func (c *lateListClient) endings() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.ends...)
}

// txnSinkWith returns a transactional sink whose outbox partition 0
// publishes through cl.
func txnSinkWith(t *testing.T, cl txnProducer, opts Options) *Sink {
	t.Helper()
	opts.TransactionalIDPrefix = "outbox-test-"
	s, err := Dial([]string{"127.0.0.1:1"}, opts)
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	s.txn.clients[0] = &txnClient{cl: cl}
	return s
}

// TestTxnPublishedOnlyIfCommitted: a transactional Publish reports its
// entries published only if kgo asked the broker to commit their
// transaction. kgo's EndTransaction(TryCommit) returns nil also when it
// aborted instead (its producer state did not list the partitions the
// records went to yet); the sink waits until kgo lists them, so kgo
// commits. If they are still unlisted at the deadline, the entries fail
// and the transaction is aborted.
func TestTxnPublishedOnlyIfCommitted(t *testing.T) {
	t.Parallel()
	entries := []outbox.Entry{
		{ID: "e1", Topic: "t", Key: "k1", Payload: []byte("1")},
		{ID: "e2", Topic: "t", Key: "k2", Payload: []byte("2")},
	}

	t.Run("ListedLate", func(t *testing.T) {
		t.Parallel()
		cl := &lateListClient{listedAfter: 3}
		s := txnSinkWith(t, cl, Options{})
		for i, err := range s.Publish(context.Background(), entries) {
			require.NoError(t, err, "entry %d", i)
		}
		assert.Equal(t, []string{"commit"}, cl.endings(), "what the published entries' transaction ended with")
	})

	t.Run("NeverListed", func(t *testing.T) {
		t.Parallel()
		cl := &lateListClient{listedAfter: -1}
		s := txnSinkWith(t, cl, Options{})
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel()
		for i, err := range s.Publish(ctx, entries) {
			require.ErrorIs(t, err, context.DeadlineExceeded, "entry %d", i)
		}
		assert.Equal(t, []string{"abort"}, cl.endings())
	})
}
