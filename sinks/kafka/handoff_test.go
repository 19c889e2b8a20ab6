package kafkasink_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/outboxrelay/outbox"
	kafkasink "github.com/outboxrelay/outbox/sinks/kafka"
)

// TestStaleRelayFencedAtHandoff is the lease boundary in transactional
// mode. Relay A publishes e1 of outbox partition 0, and the broker holds
// one of its requests (the produce, or the commit). The partition passes
// to relay B, which publishes e1 and then e2 (same key) and commits each.
// Only then does the broker handle A's request. B's producer initialized
// the partition's transactional ID after A's, so the broker fences A: a
// read_committed consumer sees B's e1 and e2, in order, and nothing of A,
// whatever the timing. A's publish either ends at its deadline first (as a
// relay's does at its lease deadline) or waits and ends fenced.
//
// The test drives the two sinks directly rather than two relays: the
// order of the handoff and the held request must be exact, and a relay's
// lease timing would make it a race.
func TestStaleRelayFencedAtHandoff(t *testing.T) {
	t.Parallel()
	for _, key := range []kmsg.Key{kmsg.Produce, kmsg.EndTxn} {
		for _, stale := range []struct {
			name     string
			deadline time.Duration
		}{
			// A's deadline leaves room for its transactional producer to
			// get its request to the broker on a loaded machine (the race
			// detector, other tests); the assertion below is relative to it.
			{"StaleRelayTimesOut", 5 * time.Second},
			{"StaleRelayWaits", time.Minute},
		} {
			t.Run(fmt.Sprintf("Held%s/%s", key.Name(), stale.name), func(t *testing.T) {
				t.Parallel()
				trace := &txnTrace{}
				c := newCluster(t, 1, []string{"t"}, kfake.WithLogger(trace))
				trace.watch(t, c)
				held := stallFirst(t, c, key)
				opts := kafkasink.Options{TransactionalIDPrefix: "outbox-handoff-"}
				a, err := kafkasink.Dial(c.ListenAddrs(), opts)
				require.NoError(t, err)
				defer a.Close()
				b, err := kafkasink.Dial(c.ListenAddrs(), opts)
				require.NoError(t, err)
				defer b.Close()
				rec := func(id, by string) []outbox.Entry {
					return []outbox.Entry{{ID: id, Topic: "t", Key: "k", Payload: []byte(by), Partition: 0}}
				}

				// Relay A publishes e1; the broker holds its request.
				ctx, cancel := context.WithTimeout(context.Background(), stale.deadline)
				defer cancel()
				aDone := make(chan error, 1)
				start := time.Now()
				go func() { aDone <- a.Publish(ctx, rec("e1", "A"))[0] }()
				waitClosed(t, held.held, "A's held request")

				if stale.deadline != time.Minute {
					errA := <-aDone
					trace.add("test: A's Publish returned %v", errA)
					due, _ := ctx.Deadline()
					t.Logf("A's Publish returned %v after its deadline", time.Since(due).Round(10*time.Microsecond))
					assert.Less(t, time.Since(start), stale.deadline+2*time.Second, "A's publish ends at its deadline")
					require.False(t, held.isHandled())
					require.ErrorIs(t, errA, context.DeadlineExceeded)
				}

				// The partition passes to B: e1 again, then e2.
				for _, id := range []string{"e1", "e2"} {
					require.NoError(t, b.Publish(context.Background(), rec(id, "B"))[0], "B's %s", id)
					trace.add("test: B published %s", id)
				}
				require.False(t, held.isHandled(), "B published while A's request was held")

				trace.add("test: releasing A's held request")
				held.release()
				waitClosed(t, held.handled, "the broker to handle A's request")
				if stale.deadline == time.Minute {
					select {
					case errA := <-aDone:
						require.ErrorIs(t, errA, kafkasink.ErrFenced, "A's transaction ends fenced")
					case <-time.After(20 * time.Second):
						t.Fatal("A's publish did not end after its request was handled")
					}
				}

				var committed []string
				for _, r := range consumeQuiet(t, c, []string{"t"}, kgo.FetchIsolationLevel(kgo.ReadCommitted())) {
					committed = append(committed, string(r.Value)+":"+kafkasink.EntryID(r))
				}
				assert.Equal(t, []string{"B:e1", "B:e2"}, committed)
				var all []string
				for _, r := range consumeQuiet(t, c, []string{"t"}) {
					all = append(all, fmt.Sprintf("%s:%s@%d", r.Value, kafkasink.EntryID(r), r.Offset))
				}
				t.Logf("read_uncommitted sees %v", all)
			})
		}
	}
}

// TestStaleRecordLandsAfterHandoffWithoutTransactions reproduces the
// anomaly transactional mode prevents: relay A's produce of e1 is held by
// the broker past A's deadline, relay B publishes e1 and e2, and then the
// broker appends A's e1 after them. Consumers drop the copy by entry ID; a
// compacted topic would keep A's e1 as the key's last value.
func TestStaleRecordLandsAfterHandoffWithoutTransactions(t *testing.T) {
	t.Parallel()
	c := newCluster(t, 1, []string{"t"})
	held := stallFirst(t, c, kmsg.Produce)
	a := dialSink(t, c)
	b := dialSink(t, c)
	rec := func(id, by string) []outbox.Entry {
		return []outbox.Entry{{ID: id, Topic: "t", Key: "k", Payload: []byte(by)}}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	require.ErrorIs(t, a.Publish(ctx, rec("e1", "A"))[0], context.DeadlineExceeded)
	waitClosed(t, held.held, "A's held request")
	for _, id := range []string{"e1", "e2"} {
		require.NoError(t, b.Publish(context.Background(), rec(id, "B"))[0], "B's %s", id)
	}
	held.release()
	waitClosed(t, held.handled, "the broker to handle A's request")
	var got []string
	for _, r := range consume(t, c, 3, []string{"t"}) {
		got = append(got, string(r.Value)+":"+kafkasink.EntryID(r))
	}
	assert.Equal(t, []string{"B:e1", "B:e2", "A:e1"}, got)
}

// txnTrace records the broker's view of the transactional requests of a
// handoff test (each InitProducerID, Produce and EndTxn with its producer
// ID and epoch, in the order the broker received them) and the broker's
// log, and prints them only when the test fails: the order of these
// requests is what decides which records a read_committed consumer sees.
type txnTrace struct {
	mu    sync.Mutex
	lines []string
	start time.Time
}

func (tr *txnTrace) add(format string, args ...any) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	if tr.start.IsZero() {
		tr.start = time.Now()
	}
	tr.lines = append(tr.lines, fmt.Sprintf("%9s ", time.Since(tr.start).Round(time.Microsecond))+fmt.Sprintf(format, args...))
}

// Logf implements kfake.Logger, keeping what the broker logs at Info and
// above (it logs every request at Debug).
func (tr *txnTrace) Logf(level kfake.LogLevel, format string, args ...any) {
	if level > kfake.LogLevelInfo {
		return
	}
	tr.add("kfake %v: "+format, append([]any{level}, args...)...)
}

func (tr *txnTrace) watch(t *testing.T, c *kfake.Cluster) {
	for _, key := range []kmsg.Key{kmsg.InitProducerID, kmsg.Produce, kmsg.EndTxn} {
		c.ControlKey(int16(key), func(req kmsg.Request) (kmsg.Response, error, bool) {
			c.KeepControl()
			switch r := req.(type) {
			case *kmsg.InitProducerIDRequest:
				tr.add("InitProducerID txn=%v pid=%d epoch=%d", deref(r.TransactionalID), r.ProducerID, r.ProducerEpoch)
			case *kmsg.EndTxnRequest:
				tr.add("EndTxn txn=%s pid=%d epoch=%d commit=%v", r.TransactionalID, r.ProducerID, r.ProducerEpoch, r.Commit)
			case *kmsg.ProduceRequest:
				tr.add("Produce txn=%v (%d topics)", deref(r.TransactionID), len(r.Topics))
			}
			return nil, nil, false
		})
	}
	t.Cleanup(func() {
		if t.Failed() {
			tr.mu.Lock()
			defer tr.mu.Unlock()
			t.Logf("broker trace:\n%s", strings.Join(tr.lines, "\n"))
		}
	})
}

func deref(s *string) string {
	if s == nil {
		return "<nil>"
	}
	return *s
}
