package kafkasink_test

import (
	"context"
	"fmt"
	"io"
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
	kafkasink "github.com/outboxrelay/outbox/sinks/kafka"
)

// drainRun describes one relay drain into kfake through a sink Dial built
// with default options.
type drainRun struct {
	keys, perKey int           // entries: perKey entries of each of keys keys
	faults       int           // NOT_ENOUGH_REPLICAS answers to produce requests
	deadline     time.Duration // give up after this long
	kopts        []kgo.Opt     // client options after Dial's
	oneKeyARound bool          // hide the sink's KeepsKeyOrder: one entry of a key per publish call
	relayOpts    func(*outbox.RelayOptions)
	partitions   int // of the memory backend; default 2
}

// plainSink hides every optional interface of the sink but LandingBounder.
type plainSink struct{ s *kafkasink.Sink }

func (p plainSink) Publish(ctx context.Context, msgs []outbox.Entry) []error {
	return p.s.Publish(ctx, msgs)
}
func (p plainSink) LandingBound() time.Duration { return p.s.LandingBound() }

type drainResult struct {
	took  time.Duration
	hits  int // faults answered
	stats outbox.RelayStats
	c     *kfake.Cluster
}

// drain appends r's entries to a memory backend (two partitions), runs a
// relay with default options over them into a 3-partition kfake topic
// whose first r.faults produce requests fail with NOT_ENOUGH_REPLICAS, and
// returns how long the relay took to publish them all. It fails t when the
// entries are not all sent (none parked) within r.deadline.
func drain(t testing.TB, r drainRun) drainResult {
	t.Helper()
	c := newCluster(t, 3, []string{"events"})
	sink, err := kafkasink.Dial(c.ListenAddrs(), kafkasink.Options{}, r.kopts...)
	require.NoError(t, err)
	defer sink.Close()
	var relaySink outbox.Sink = sink
	if r.oneKeyARound {
		relaySink = plainSink{sink}
	}
	// Warm the client up (metadata, producer ID) so the faults hit
	// records of the relay and not the first connection.
	require.NoError(t, sink.Publish(context.Background(), []outbox.Entry{entry("warm-up", "events", "", "")})[0])

	b := memory.New(memory.Options{Partitions: max(r.partitions, 2)})
	defer b.Close()
	ctx := context.Background()
	tx := b.Begin()
	var es []outbox.Entry
	for s := range r.perKey {
		for k := range r.keys {
			es = append(es, outbox.Entry{
				ID: fmt.Sprintf("k%04d-%03d", k, s), Topic: "events", Key: fmt.Sprintf("key-%04d", k),
				Payload: []byte(strconv.Itoa(s)),
			})
		}
	}
	require.NoError(t, b.AppendInTx(ctx, tx, es...))
	require.NoError(t, tx.Commit())

	var h *kfake.FaultHandle
	if r.faults > 0 {
		h = c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: "events", Err: kerr.NotEnoughReplicas, Count: r.faults})
	}
	ro := outbox.RelayOptions{
		PollInterval: 20 * time.Millisecond,
		Logger:       slog.New(slog.NewTextHandler(io.Discard, nil)),
	}
	if r.relayOpts != nil {
		r.relayOpts(&ro)
	}
	relay, err := outbox.NewRelay(b, relaySink, ro)
	require.NoError(t, err)
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	start := time.Now()
	require.NoError(t, relay.Start(rctx))
	defer func() { _ = relay.Stop(context.Background()) }()
	for {
		st, err := b.Stats(ctx)
		require.NoError(t, err)
		if st.Pending == 0 && st.Parked == 0 {
			break
		}
		require.Zero(t, st.Parked, "nothing parks")
		if time.Since(start) > r.deadline {
			t.Fatalf("%d faults: entries still pending after %v: %+v, relay %+v", r.faults, r.deadline, st, relay.Stats())
		}
		time.Sleep(5 * time.Millisecond)
	}
	res := drainResult{took: time.Since(start), stats: relay.Stats(), c: c}
	if h != nil {
		res.hits = h.Hits()
	}
	return res
}

// TestRelayDrainsThroughTransientFaults drains entries of many keys
// through the relay while produce requests fail with NOT_ENOUGH_REPLICAS:
// everything arrives, nothing parks, and the first delivery of each
// key's entries is in append order. It logs the drain times (compare
// them with BenchmarkRelayDrainUnderFaults); it asserts none.
func TestRelayDrainsThroughTransientFaults(t *testing.T) {
	t.Parallel()
	for _, faults := range []int{0, 3, 20, 50} {
		t.Run(fmt.Sprintf("faults=%d", faults), func(t *testing.T) {
			t.Parallel()
			const keys, perKey = 200, 5
			res := drain(t, drainRun{keys: keys, perKey: perKey, faults: faults, deadline: 3 * time.Minute})
			assert.Equal(t, faults, res.hits, "every fault was hit")
			recs := consumeQuiet(t, res.c, []string{"events"})
			next := map[string]int{}
			seen := map[string]bool{}
			for _, rec := range recs {
				id := kafkasink.EntryID(rec)
				if id == "warm-up" || seen[id] {
					continue
				}
				seen[id] = true
				seq, err := strconv.Atoi(string(rec.Value))
				require.NoError(t, err)
				key := string(rec.Key)
				assert.Equal(t, next[key], seq, "key %s: first deliveries out of order", key)
				next[key] = seq + 1
			}
			assert.Len(t, seen, keys*perKey, "every entry arrives")
			t.Logf("%d faults: drained %d entries in %v (%d records, relay %+v)", faults, keys*perKey, res.took.Round(time.Millisecond), len(recs), res.stats)
		})
	}
}

// BenchmarkRelayDrainUnderFaults measures the issue-11 scenario: a relay
// with default options drains 2,000 entries of distinct keys from the
// memory backend into kfake through a sink Dial built with default
// options, while the first N produce requests fail with
// NOT_ENOUGH_REPLICAS. It reports the drain time.
//
//	go test -run '^$' -bench RelayDrainUnderFaults -benchtime 1x ./sinks/kafka/
func BenchmarkRelayDrainUnderFaults(b *testing.B) {
	for _, faults := range []int{0, 1, 3, 8, 20, 50, 100} {
		b.Run(fmt.Sprintf("faults=%d", faults), func(b *testing.B) {
			var total time.Duration
			for b.Loop() {
				total += drain(b, drainRun{keys: 2000, perKey: 1, faults: faults, deadline: 3 * time.Minute}).took
			}
			b.ReportMetric(total.Seconds()/float64(b.N), "s/drain")
		})
	}
}

// BenchmarkRelayDrainLinger drains 2,000 entries of one key ("hot") and
// 2,000 entries of distinct keys ("many") like BenchmarkRelayDrainUnderFaults,
// with the client's ProducerLinger set to each value, and (linger=default)
// with the sink as Dial builds it; "one-per-round" hides the sink's
// KeepsKeyOrder and sets kgo's default linger (10ms), as the relay and Dial
// published before issue 11.
//
//	go test -run '^$' -bench RelayDrainLinger -benchtime 3x ./sinks/kafka/
func BenchmarkRelayDrainLinger(b *testing.B) {
	for _, shape := range []struct {
		name         string
		keys, perKey int
	}{{"hot", 1, 2000}, {"many", 2000, 1}} {
		for _, linger := range []string{"default", "0", "1ms", "5ms", "10ms", "one-per-round"} {
			b.Run(fmt.Sprintf("%s/linger=%s", shape.name, linger), func(b *testing.B) {
				run := drainRun{keys: shape.keys, perKey: shape.perKey, deadline: 3 * time.Minute}
				switch linger {
				case "default":
				case "one-per-round":
					// As the relay and Dial were before issue 11: one
					// entry of a key per call, kgo's 10ms linger.
					run.oneKeyARound = true
					run.kopts = []kgo.Opt{kgo.ProducerLinger(10 * time.Millisecond)}
				default:
					d, err := time.ParseDuration(linger)
					if linger == "0" {
						d, err = 0, nil
					}
					require.NoError(b, err)
					run.kopts = []kgo.Opt{kgo.ProducerLinger(d)}
				}
				var total time.Duration
				for b.Loop() {
					total += drain(b, run).took
				}
				b.ReportMetric(float64(shape.keys*shape.perKey*b.N)/total.Seconds(), "entries/s")
			})
		}
	}
}

// BenchmarkRelayDrainBreaker is BenchmarkRelayDrainUnderFaults with 50 and
// 100 faults under breaker settings: the defaults, the breaker off, and
// other cooldowns and backpressure scales.
//
//	go test -run '^$' -bench RelayDrainBreaker -benchtime 1x ./sinks/kafka/
func BenchmarkRelayDrainBreaker(b *testing.B) {
	for _, faults := range []int{50, 100} {
		for _, parts := range []int{2, 8} {
			for _, cfg := range []struct {
				name string
				set  func(*outbox.RelayOptions)
			}{
				{"default", nil},
				{"off", func(o *outbox.RelayOptions) { o.BreakerThreshold = -1 }},
				{"cooldown=1s", func(o *outbox.RelayOptions) { o.BreakerCooldown = time.Second }},
				{"scale=1", func(o *outbox.RelayOptions) { o.BackpressureScale = 1 }},
				{"cooldown=1s,scale=1", func(o *outbox.RelayOptions) { o.BreakerCooldown, o.BackpressureScale = time.Second, 1 }},
				{"threshold=10", func(o *outbox.RelayOptions) { o.BreakerThreshold = 10 }},
				{"threshold=10,cooldown=1s", func(o *outbox.RelayOptions) { o.BreakerThreshold, o.BreakerCooldown = 10, time.Second }},
			} {
				b.Run(fmt.Sprintf("faults=%d/partitions=%d/%s", faults, parts, cfg.name), func(b *testing.B) {
					var total time.Duration
					for b.Loop() {
						total += drain(b, drainRun{keys: 2000, perKey: 1, faults: faults, deadline: 3 * time.Minute, relayOpts: cfg.set, partitions: parts}).took
					}
					b.ReportMetric(total.Seconds()/float64(b.N), "s/drain")
				})
			}
		}
	}
}

// BenchmarkRelayDrainHotKeyFaults drains 2,000 entries of one key ("hot")
// or of distinct keys ("many") with 0 and 20 NOT_ENOUGH_REPLICAS faults,
// as the relay and Dial publish now ("after") and as they did before issue
// 11 ("before": one entry of a key per call, kgo's 10ms linger).
//
//	go test -run '^$' -bench RelayDrainHotKeyFaults -benchtime 1x ./sinks/kafka/
func BenchmarkRelayDrainHotKeyFaults(b *testing.B) {
	for _, shape := range []struct {
		name         string
		keys, perKey int
	}{{"hot", 1, 2000}, {"many", 2000, 1}} {
		for _, when := range []string{"before", "after"} {
			for _, faults := range []int{0, 20} {
				b.Run(fmt.Sprintf("%s/%s/faults=%d", shape.name, when, faults), func(b *testing.B) {
					run := drainRun{keys: shape.keys, perKey: shape.perKey, faults: faults, deadline: 3 * time.Minute}
					if when == "before" {
						run.oneKeyARound = true
						run.kopts = []kgo.Opt{kgo.ProducerLinger(10 * time.Millisecond)}
					}
					var total time.Duration
					for b.Loop() {
						total += drain(b, run).took
					}
					b.ReportMetric(float64(shape.keys*shape.perKey*b.N)/total.Seconds(), "entries/s")
					b.ReportMetric(total.Seconds()/float64(b.N), "s/drain")
				})
			}
		}
	}
}
