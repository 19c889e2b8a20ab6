package kafkasink_test

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"sync/atomic"
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

// nthProduce returns a kfake When filter that matches only the nth produce
// request (1-based) the cluster sees from now on.
func nthProduce(n int64) func(kmsg.Request) bool {
	var seen atomic.Int64
	return func(kmsg.Request) bool { return seen.Add(1) == n }
}

// TestPublishOfOneKeyFailsTheRecordsAfterAFailure establishes what kgo's
// idempotent producer does to the later records of a Kafka partition when
// an earlier batch fails, which is what Sink.KeepsKeyOrder promises: one
// Publish call of 200 records of one key, spread over many small Kafka
// batches (several in flight at once), while one produce request in the
// middle fails. Whatever fails, the records that land are exactly the
// ones Publish reports acknowledged, in order, each once, and no record
// lands after one of its key that failed retryably: a batch failure fails
// the records kgo holds for the partition, but records produced after kgo
// handled it are written under a new producer sequence (on a loaded
// machine the call is often still producing), and Publish then reports
// the overtaken failures permanent, so the relay parks them instead of
// retrying them out of order.
func TestPublishOfOneKeyFailsTheRecordsAfterAFailure(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		fault func(c *kfake.Cluster)
		// failed: some records fail (a permanent batch error, or kgo's
		// retries run out); otherwise every record is acknowledged.
		failed bool
	}{
		{"transient error is retried by kgo", func(c *kfake.Cluster) {
			c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: "events", Err: kerr.NotEnoughReplicas, When: nthProduce(3)})
		}, false},
		{"leader not available then retried", func(c *kfake.Cluster) {
			c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: "events", Err: kerr.NotLeaderForPartition, When: nthProduce(2)})
		}, false},
		{"permanent batch error", func(c *kfake.Cluster) {
			c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: "events", Err: kerr.InvalidRecord, When: nthProduce(3)})
		}, true},
		{"retries run out", func(c *kfake.Cluster) {
			c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: "events", Err: kerr.NotEnoughReplicas, Count: 40})
		}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := newCluster(t, 1, []string{"events"})
			sink, err := kafkasink.Dial(c.ListenAddrs(), kafkasink.Options{},
				kgo.ProducerBatchMaxBytes(2048), kgo.ProducerLinger(0))
			require.NoError(t, err)
			defer sink.Close()
			require.True(t, sink.KeepsKeyOrder())
			require.NoError(t, sink.Publish(context.Background(), []outbox.Entry{entry("warm-up", "events", "w", "")})[0])
			msgs := make([]outbox.Entry, 200)
			for i := range msgs {
				msgs[i] = entry(fmt.Sprintf("e%03d", i), "events", "hot", fmt.Sprintf("%0100d", i))
			}
			tc.fault(c)
			errs := sink.Publish(context.Background(), msgs)
			firstFail, retryable, acked := len(msgs), -1, 0
			var want []string // acknowledged, in order
			for i, err := range errs {
				if err != nil && firstFail == len(msgs) {
					firstFail = i
				}
				switch {
				case err == nil:
					acked++
					want = append(want, msgs[i].ID)
					assert.Equal(t, -1, retryable, "e%03d acknowledged after e%03d failed retryably: a retry would deliver it out of order", i, retryable)
				case retryable < 0 && backoff.ClassOf(err) != backoff.ClassPermanent:
					retryable = i
				}
			}
			if tc.failed {
				require.Less(t, firstFail, len(msgs), "something failed")
				if firstFail+1 < len(errs) && errs[firstFail+1] != nil && acked == firstFail {
					assert.NotEqual(t, backoff.ClassPermanent, backoff.ClassOf(errs[firstFail+1]),
						"a record failed behind another one, with nothing of its key written after the failure, is retried, not parked: %v", errs[firstFail+1])
				}
			} else {
				require.Equal(t, len(msgs), firstFail, "everything acknowledged: %v", errs[firstFail%len(msgs)])
			}
			got := []string{}
			for _, rec := range consumeQuiet(t, c, []string{"events"}) {
				if id := kafkasink.EntryID(rec); id != "warm-up" {
					got = append(got, id)
				}
			}
			if want == nil {
				want = []string{}
			}
			assert.Equal(t, want, got, "landed: exactly the acknowledged records, in order, once each")
			t.Logf("%s: %d of %d acknowledged, the first failure at e%03d: %v", tc.name, acked, len(msgs), firstFail, errs[firstFail%len(msgs)])
		})
	}
}

// TestRelayDrainsAHotKeyInOrderThroughFaults drains 1,000 entries of one
// key and 200 of 50 others through a relay into kfake while produce
// requests fail, one stalls past PublishTimeout, or a partition's leader
// moves, and checks what a consumer reads back: every entry that was not
// parked arrives, and each key's first deliveries are in append order.
func TestRelayDrainsAHotKeyInOrderThroughFaults(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		brokers int
		fault   func(t *testing.T, c *kfake.Cluster) // after the warm-up, before the relay starts
		during  func(t *testing.T, c *kfake.Cluster) // while the relay drains
		parks   bool                                 // a permanent fault parks an entry
	}{
		{name: "no fault", brokers: 1},
		{name: "20 transient faults", brokers: 1, fault: func(t *testing.T, c *kfake.Cluster) {
			c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: "events", Err: kerr.NotEnoughReplicas, Count: 20})
		}},
		{name: "50 transient faults", brokers: 1, fault: func(t *testing.T, c *kfake.Cluster) {
			c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: "events", Err: kerr.NotEnoughReplicas, Count: 50})
		}},
		{name: "a permanent batch error", brokers: 1, parks: true, fault: func(t *testing.T, c *kfake.Cluster) {
			c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: "events", Err: kerr.InvalidRecord, When: nthProduce(4)})
		}},
		{name: "a produce request stalls past PublishTimeout", brokers: 1, fault: func(t *testing.T, c *kfake.Cluster) {
			st := stallFirst(t, c, kmsg.Produce)
			go func() {
				<-st.held
				time.Sleep(6 * time.Second)
				st.release()
			}()
		}},
		{name: "leader moves", brokers: 3, during: func(t *testing.T, c *kfake.Cluster) {
			for p := range int32(3) {
				now := c.LeaderFor("events", p)
				require.NoError(t, c.MoveTopicPartition("events", p, (now+1)%3))
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := newCluster(t, 3, []string{"events"}, kfake.NumBrokers(tc.brokers))
			sink, err := kafkasink.Dial(c.ListenAddrs(), kafkasink.Options{})
			require.NoError(t, err)
			defer sink.Close()
			require.NoError(t, sink.Publish(context.Background(), []outbox.Entry{entry("warm-up", "events", "", "")})[0])

			b := memory.New(memory.Options{Partitions: 2})
			defer b.Close()
			ctx := context.Background()
			var es []outbox.Entry
			for i := range 1000 {
				es = append(es, outbox.Entry{ID: fmt.Sprintf("hot-%04d", i), Topic: "events", Key: "hot", Payload: []byte(strconv.Itoa(i))})
				if i%5 == 0 {
					k := i / 5 % 50
					es = append(es, outbox.Entry{ID: fmt.Sprintf("k%02d-%04d", k, i), Topic: "events", Key: fmt.Sprintf("key-%02d", k), Payload: []byte(strconv.Itoa(i))})
				}
			}
			for off := 0; off < len(es); off += 100 {
				tx := b.Begin()
				require.NoError(t, b.AppendInTx(ctx, tx, es[off:min(off+100, len(es))]...))
				require.NoError(t, tx.Commit())
			}
			if tc.fault != nil {
				tc.fault(t, c)
			}
			relay, err := outbox.NewRelay(b, sink, outbox.RelayOptions{
				PollInterval: 20 * time.Millisecond,
				Backoff:      backoff.Policy{Base: 50 * time.Millisecond, Max: 500 * time.Millisecond},
				Logger:       slog.New(slog.DiscardHandler),
			})
			require.NoError(t, err)
			start := time.Now()
			require.NoError(t, relay.Start(ctx))
			defer func() { _ = relay.Stop(context.Background()) }()
			if tc.during != nil {
				time.Sleep(20 * time.Millisecond)
				tc.during(t, c)
			}
			var st outbox.Stats
			for {
				st, err = b.Stats(ctx)
				require.NoError(t, err)
				if st.Pending == 0 {
					break
				}
				if time.Since(start) > 2*time.Minute {
					t.Fatalf("entries still pending after 2m: %+v, relay %+v", st, relay.Stats())
				}
				time.Sleep(5 * time.Millisecond)
			}
			took := time.Since(start)
			if !tc.parks {
				require.Zero(t, st.Parked, "nothing parks")
			}
			parked := map[string]bool{}
			for after := ""; ; {
				ps, err := b.Parked(ctx, after, 100)
				require.NoError(t, err)
				for _, p := range ps {
					parked[p.ID] = true
				}
				if len(ps) < 100 {
					break
				}
				after = ps[len(ps)-1].ID
			}
			require.Len(t, parked, int(st.Parked), "every parked entry listed")
			recs := consumeQuiet(t, c, []string{"events"})
			seq := map[string]int{}
			for i, e := range es {
				seq[e.ID] = i
			}
			last := map[string]int{}
			seen := map[string]bool{}
			dups := 0
			for _, rec := range recs {
				id := kafkasink.EntryID(rec)
				if id == "warm-up" {
					continue
				}
				if seen[id] {
					dups++
					continue
				}
				seen[id] = true
				key := string(rec.Key)
				if p, ok := last[key]; ok && seq[id] < p {
					t.Fatalf("key %s: %s first delivered after %s", key, id, es[p].ID)
				}
				last[key] = seq[id]
			}
			for _, e := range es {
				if !seen[e.ID] && !parked[e.ID] {
					t.Fatalf("%s neither delivered nor parked", e.ID)
				}
			}
			t.Logf("%s: drained %d entries in %v; %d parked, %d duplicates; relay %+v", tc.name, len(es), took.Round(time.Millisecond), len(parked), dups, relay.Stats())
		})
	}
}
