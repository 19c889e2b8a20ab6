package outbox_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/outboxrelay/outbox"
	"github.com/outboxrelay/outbox/backends/memory"
	"github.com/outboxrelay/outbox/backoff"
)

// The relay's side of issue 28: an open breaker defers without counting
// attempts, pauses stored in the outbox stop delivery, and heartbeats say
// which relay is which.

// keyOrdered is a recorder that keeps the order of a key's messages within
// one Publish call (KeyOrderer), as the Kafka sink does: the relay then
// puts a key's consecutive entries of one topic in one round.
type keyOrdered struct{ *recorder }

func (keyOrdered) KeepsKeyOrder() bool { return true }

func lookup(t *testing.T, b *memory.Backend, id string) outbox.EntryInfo {
	t.Helper()
	info, err := b.Lookup(context.Background(), id)
	if err != nil {
		t.Fatalf("Lookup(%s): %v", id, err)
	}
	return info
}

func pauser(t *testing.T, b outbox.Store) outbox.Pauser {
	t.Helper()
	p, ok := b.(outbox.Pauser)
	if !ok {
		t.Fatalf("%T does not implement outbox.Pauser", b)
	}
	return p
}

// TestRelayBreakerDefersWithoutAttempts: a key's head fails three times
// with distinct errors and its topic's breaker opens (another topic works,
// so the topic is the problem). The head is then deferred: its attempts,
// last error (the sink's, not the breaker's) and history stay as the three
// failures left them, and it is not parked though MaxAttempts is 4. Of a
// hot key appended afterwards, which the key-ordering sink gets in one
// round, only the first entry is deferred; the others are given back with
// no attempt, and unkeyed entries are each deferred.
func TestRelayBreakerDefersWithoutAttempts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New(memory.Options{})
		sink := keyOrdered{&recorder{fail: func(e outbox.Entry, attempt int) error {
			if e.Topic == "dead" {
				return fmt.Errorf("broker error %d for %s", attempt, e.ID)
			}
			return nil
		}}}
		var logs lockedBuffer
		r := startRelay(t, b, sink, outbox.RelayOptions{
			BatchSize: 10, PollInterval: 10 * time.Millisecond,
			Backoff:          backoff.Policy{Base: time.Millisecond, Max: time.Millisecond, Min: time.Millisecond, MaxAttempts: 4},
			BreakerThreshold: 3, BreakerCooldown: time.Hour,
			Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn})),
		})
		appendAll(t, b, outbox.Entry{ID: "warm-up", Topic: "live", Key: "w"})
		waitFor(t, time.Minute, "the warm-up entry", func() bool { return len(sink.snapshot()) == 1 })
		appendAll(t, b, outbox.Entry{ID: "head", Topic: "dead", Key: "k"})
		waitFor(t, time.Minute, "the dead topic's breaker open", func() bool { return strings.Contains(logs.String(), "circuit breaker opened") })
		waitFor(t, time.Minute, "the head deferred", func() bool {
			info := lookup(t, b, "head")
			if info.Attempts > 3 || info.Parked {
				t.Fatalf("the head has %d attempts (parked %v, last error %q) after three failures: the open breaker counted attempts", info.Attempts, info.Parked, info.LastError)
			}
			return info.Deferred
		})
		synctest.Wait()
		head := lookup(t, b, "head")
		var history []string
		for _, a := range head.History {
			history = append(history, a.Error)
			if a.Owner != r.Owner() {
				t.Errorf("attempt %q by %q, want the relay %q", a.Error, a.Owner, r.Owner())
			}
		}
		want := []string{"broker error 1 for head", "broker error 2 for head", "broker error 3 for head"}
		if head.Attempts != 3 || head.LastError != want[2] || !slices.Equal(history, want) || head.Parked {
			t.Fatalf("the deferred head: Attempts %d, LastError %q, History %q, Parked %v; want 3 attempts, the sink's last error and its three errors in order, pending",
				head.Attempts, head.LastError, history, head.Parked)
		}

		var hot []outbox.Entry
		for i := range 4 {
			hot = append(hot, outbox.Entry{ID: fmt.Sprint("hot-", i), Topic: "dead", Key: "hot"})
		}
		appendAll(t, b, append(hot, outbox.Entry{ID: "free-0", Topic: "dead"}, outbox.Entry{ID: "free-1", Topic: "dead"})...)
		waitFor(t, time.Minute, "hot-0 and the unkeyed entries deferred", func() bool {
			return lookup(t, b, "hot-0").Deferred && lookup(t, b, "free-0").Deferred && lookup(t, b, "free-1").Deferred
		})
		time.Sleep(time.Second) // a hundred polls
		synctest.Wait()
		for _, id := range []string{"hot-0", "hot-1", "hot-2", "hot-3", "free-0", "free-1"} {
			info := lookup(t, b, id)
			if info.Attempts != 0 || info.History != nil || info.LastError != "" || info.Parked {
				t.Errorf("%s, never handed to the sink: Attempts %d, History %v, LastError %q, Parked %v; want none", id, info.Attempts, info.History, info.LastError, info.Parked)
			}
			if deferred := id == "hot-0" || strings.HasPrefix(id, "free-"); info.Deferred != deferred {
				t.Errorf("%s: Deferred = %v, want %v (only the first entry of a key is deferred; the rest wait behind it)", id, info.Deferred, deferred)
			}
		}
		sink.mu.Lock()
		for _, e := range hot {
			if n := sink.attempts[e.ID]; n != 0 {
				t.Errorf("%s was handed to the sink %d times while its topic's breaker is open", e.ID, n)
			}
		}
		sink.mu.Unlock()
		if st := r.Stats(); st.Retried != 3 || st.Parked != 0 {
			t.Errorf("relay stats %+v: want Retried 3 (the head's failures; deferrals are not attempts) and nothing parked", st)
		}
	})
}

// TestRelayBreakerOfADownSinkDefersNothing: when no topic's breaker is
// closed (the sink is down), an open breaker gives its entries back as
// they are: no deferral, no attempt, the sink's last error kept.
func TestRelayBreakerOfADownSinkDefersNothing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New(memory.Options{})
		sink := keyOrdered{&recorder{fail: func(e outbox.Entry, attempt int) error {
			return fmt.Errorf("broker down, attempt %d of %s", attempt, e.ID)
		}}}
		appendAll(t, b, outbox.Entry{ID: "e-0", Topic: "t", Key: "k"}, outbox.Entry{ID: "e-1", Topic: "t", Key: "k"})
		startRelay(t, b, sink, outbox.RelayOptions{
			PollInterval:     10 * time.Millisecond,
			Backoff:          backoff.Policy{Base: time.Millisecond, Max: time.Millisecond, Min: time.Millisecond, MaxAttempts: 3},
			BreakerThreshold: 2, BreakerCooldown: time.Hour,
		})
		time.Sleep(time.Minute)
		synctest.Wait()
		head := lookup(t, b, "e-0")
		if head.Attempts != 2 || head.Deferred || head.Parked || head.LastError != "broker down, attempt 2 of e-0" {
			t.Fatalf("e-0 a minute into an outage (breaker open after 2 rounds): Attempts %d, Deferred %v, Parked %v, LastError %q; want 2 attempts, neither deferred nor parked, the sink's last error",
				head.Attempts, head.Deferred, head.Parked, head.LastError)
		}
		if next := lookup(t, b, "e-1"); next.Attempts != 0 || next.Deferred {
			t.Fatalf("e-1 behind it: Attempts %d, Deferred %v; want untouched", next.Attempts, next.Deferred)
		}
	})
}

// blockingSink holds its first Publish call until release is closed, and
// records every message it is handed.
type blockingSink struct {
	recorder
	held    chan struct{} // closed when the first call is held
	release chan struct{}
	once    sync.Once
}

func (s *blockingSink) Publish(ctx context.Context, msgs []outbox.Entry) []error {
	first := false
	s.once.Do(func() { first = true })
	if first {
		close(s.held)
		<-s.release
	}
	return s.recorder.Publish(ctx, msgs)
}

// TestRelayGivesBackAPausedTopicOfABatchFetchedBeforeThePause: the topic
// is paused while a batch holding its entries is being published; once the
// relay has read the pause, the rest of the batch's entries of the topic
// are given back unattempted (their key held back), the other topic's go
// on, and after the resume the held entries are delivered in key order.
func TestRelayGivesBackAPausedTopicOfABatchFetchedBeforeThePause(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New(memory.Options{})
		// Without KeyOrderer: round 0 is k-0 and x-0, round 1 k-1 and x-1.
		appendAll(t, b,
			outbox.Entry{ID: "k-0", Topic: "t", Key: "k"}, outbox.Entry{ID: "k-1", Topic: "t", Key: "k"},
			outbox.Entry{ID: "x-0", Topic: "u", Key: "x"}, outbox.Entry{ID: "x-1", Topic: "u", Key: "x"})
		sink := &blockingSink{held: make(chan struct{}), release: make(chan struct{})}
		var logs lockedBuffer
		startRelay(t, b, sink, outbox.RelayOptions{
			BatchSize: 10, PollInterval: 100 * time.Millisecond,
			Logger: slog.New(slog.NewTextHandler(&logs, nil)),
		})
		<-sink.held
		if err := pauser(t, b).PauseTopic(context.Background(), "t"); err != nil {
			t.Fatal(err)
		}
		waitFor(t, time.Minute, "the relay to read the pause", func() bool { return strings.Contains(logs.String(), "topic paused") })
		close(sink.release)
		waitFor(t, time.Minute, "x-1", func() bool {
			return slices.ContainsFunc(sink.snapshot(), func(e outbox.Entry) bool { return e.ID == "x-1" })
		})
		time.Sleep(time.Second) // ten polls
		synctest.Wait()
		sink.mu.Lock()
		n := sink.attempts["k-1"]
		sink.mu.Unlock()
		if n != 0 {
			t.Fatalf("k-1 was handed to the sink %d times after the relay read that its topic is paused", n)
		}
		if info := lookup(t, b, "k-1"); info.Attempts != 0 || info.Parked {
			t.Fatalf("k-1 while paused: Attempts %d, Parked %v; want a pending entry with no attempt", info.Attempts, info.Parked)
		}
		if err := pauser(t, b).ResumeTopic(context.Background(), "t"); err != nil {
			t.Fatal(err)
		}
		waitFor(t, time.Minute, "every entry after the resume", func() bool { return len(sink.snapshot()) == 4 })
		seq := map[string]int{"k-0": 0, "k-1": 1, "x-0": 2, "x-1": 3}
		if err := checkKeyOrder(sink.snapshot(), seq); err != nil {
			t.Fatal(err)
		}
	})
}

// TestRelayPauseIsLoggedAndExported: each pause and resume of a topic or a
// partition is logged once at INFO, and exported as a gauge while it lasts;
// with nothing paused each gauge has one series at 0.
func TestRelayPauseIsLoggedAndExported(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New(memory.Options{Partitions: 2})
		reader := sdkmetric.NewManualReader()
		mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
		var logs lockedBuffer
		startRelay(t, b, outbox.ChannelSink(make(chan outbox.Entry, 10)), outbox.RelayOptions{
			PollInterval: 50 * time.Millisecond, MeterProvider: mp,
			Logger: slog.New(slog.NewTextHandler(&logs, nil)),
		})
		nothingPaused := func(when string) {
			t.Helper()
			ms := collect(t, reader)
			for _, name := range []string{outbox.MetricPausedTopic, outbox.MetricPausedPartition} {
				d, ok := ms[name].Data.(metricdata.Gauge[int64])
				if !ok || len(d.DataPoints) != 1 || d.DataPoints[0].Value != 0 || d.DataPoints[0].Attributes.Len() != 0 {
					t.Errorf("%s %s = %+v, want one point 0 without attributes", name, when, ms[name].Data)
				}
			}
		}
		time.Sleep(time.Second)
		synctest.Wait()
		nothingPaused("before any pause")
		p := pauser(t, b)
		ctx := context.Background()
		if err := p.PauseTopic(ctx, "orders"); err != nil {
			t.Fatal(err)
		}
		if err := p.PausePartition(ctx, 1); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Second) // twenty polls
		synctest.Wait()
		ms := collect(t, reader)
		points := func(name string) []string {
			d, _ := ms[name].Data.(metricdata.Gauge[int64])
			var out []string
			for _, dp := range d.DataPoints {
				out = append(out, fmt.Sprintf("%s=%d", dp.Attributes.Encoded(attribute.DefaultEncoder()), dp.Value))
			}
			return out
		}
		if got := points(outbox.MetricPausedTopic); !slices.Equal(got, []string{"topic=orders=1"}) {
			t.Errorf("%s while orders is paused = %q, want [topic=orders=1]", outbox.MetricPausedTopic, got)
		}
		if got := points(outbox.MetricPausedPartition); !slices.Equal(got, []string{"partition=1=1"}) {
			t.Errorf("%s while partition 1 is paused = %q, want [partition=1=1]", outbox.MetricPausedPartition, got)
		}
		if err := p.ResumeTopic(ctx, "orders"); err != nil {
			t.Fatal(err)
		}
		if err := p.ResumePartition(ctx, 1); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Second)
		synctest.Wait()
		nothingPaused("after the resumes")
		out := logs.String()
		for _, line := range []string{
			`level=INFO msg="outbox relay: topic paused" component=outbox.relay`,
			`level=INFO msg="outbox relay: partition paused"`,
			`level=INFO msg="outbox relay: topic resumed"`,
			`level=INFO msg="outbox relay: partition resumed"`,
		} {
			if n := strings.Count(out, line); n != 1 {
				t.Errorf("%q logged %d times over twenty polls, want once:\n%s", line, n, out)
			}
		}
		for _, attr := range []string{"topic=orders since=", "partition=1 since=", "topic=orders paused_since=", "partition=1 paused_since="} {
			if !strings.Contains(out, attr) {
				t.Errorf("no log line carries %q:\n%s", attr, out)
			}
		}
	})
}

// TestRelayResumeWakesTheWorkers: on reading a resume the relay wakes its
// workers, so the resumed topic is fetched at once, not at the worker's
// next poll. The worker's polls are put half a PollInterval out of step
// with the coordinator's reads (a Notify), so a worker that is not woken
// fetches half an interval after the relay learns of the resume.
func TestRelayResumeWakesTheWorkers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const poll = time.Second
		b := memory.New(memory.Options{})
		ctx := context.Background()
		p := pauser(t, b)
		if err := p.PauseTopic(ctx, "t"); err != nil {
			t.Fatal(err)
		}
		appendAll(t, b, outbox.Entry{ID: "e", Topic: "t", Key: "k"})
		sink := &recorder{}
		start := time.Now()
		r := startRelay(t, b, sink, outbox.RelayOptions{PollInterval: poll})
		time.Sleep(poll / 2)
		r.Notify() // the worker's next polls: 1.5, 2.5 … intervals after start
		time.Sleep(poll / 5)
		if err := p.ResumeTopic(ctx, "t"); err != nil { // read at 1 interval after start
			t.Fatal(err)
		}
		waitFor(t, time.Minute, "the resumed entry", func() bool { return len(sink.snapshot()) == 1 })
		if took := time.Since(start); took >= poll+poll/4 {
			t.Fatalf("the resumed entry was delivered %v after the start; the relay read the resume at %v and should have fetched at once", took, poll)
		}
	})
}

// TestRelayPausedTopicWaitsAcrossAFleet: three relays share an outbox; a
// topic paused while they run gets nothing delivered (nor do the entries
// of other topics behind its entries' keys), with no attempt counted,
// while the other topic flows; after the resume everything is delivered
// once, in key order.
func TestRelayPausedTopicWaitsAcrossAFleet(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New(memory.Options{Partitions: 4})
		sink := &recorder{}
		for i := range 3 {
			startRelay(t, b, sink, outbox.RelayOptions{Owner: fmt.Sprint("relay-", i), BatchSize: 5, PollInterval: 20 * time.Millisecond, LeaseTTL: time.Second})
		}
		time.Sleep(time.Second) // the fleet settles
		p := pauser(t, b)
		if err := p.PauseTopic(context.Background(), "paused"); err != nil {
			t.Fatal(err)
		}
		var all []outbox.Entry
		pausedIDs, liveIDs, behindIDs := map[string]bool{}, map[string]bool{}, map[string]bool{}
		for i := range 8 {
			for k := range 5 {
				pe := outbox.Entry{ID: fmt.Sprintf("p%d-%d", k, i), Topic: "paused", Key: fmt.Sprint("pk", k)}
				le := outbox.Entry{ID: fmt.Sprintf("l%d-%d", k, i), Topic: "live", Key: fmt.Sprint("lk", k)}
				me := outbox.Entry{ID: fmt.Sprintf("m%d-%d", k, i), Topic: "paused", Key: fmt.Sprint("mk", k)}
				pausedIDs[pe.ID], liveIDs[le.ID] = true, true
				if i%2 == 1 { // the key's entries alternate between the topics
					me.Topic = "live"
					behindIDs[me.ID] = true
				} else {
					pausedIDs[me.ID] = true
				}
				all = append(all, pe, le, me)
			}
		}
		for c := range slices.Chunk(all, 9) {
			appendAll(t, b, c...)
		}
		waitFor(t, time.Minute, "the live topic", func() bool {
			n := 0
			for _, e := range sink.snapshot() {
				if liveIDs[e.ID] {
					n++
				}
			}
			return n == len(liveIDs)
		})
		time.Sleep(time.Second) // fifty polls
		synctest.Wait()
		sink.mu.Lock()
		for id, n := range sink.attempts {
			if pausedIDs[id] || behindIDs[id] {
				t.Errorf("%s was handed to the sink %d times while topic paused is paused (or its key waits behind it)", id, n)
			}
		}
		sink.mu.Unlock()
		for id := range pausedIDs {
			if info := lookup(t, b, id); info.Attempts != 0 || info.Parked || info.Deferred {
				t.Errorf("%s while paused: Attempts %d, Parked %v, Deferred %v; want pending and untouched", id, info.Attempts, info.Parked, info.Deferred)
			}
		}
		if err := p.ResumeTopic(context.Background(), "paused"); err != nil {
			t.Fatal(err)
		}
		waitFor(t, time.Minute, "everything after the resume", func() bool { return len(sink.snapshot()) >= len(all) })
		time.Sleep(time.Second)
		synctest.Wait()
		got := sink.snapshot()
		seen := map[string]bool{}
		for _, e := range got {
			if seen[e.ID] {
				t.Errorf("%s delivered twice", e.ID)
			}
			seen[e.ID] = true
		}
		if len(seen) != len(all) {
			t.Fatalf("%d distinct entries delivered, want %d", len(seen), len(all))
		}
		seq := map[string]int{}
		for i, e := range all {
			seq[e.ID] = i
		}
		if err := checkKeyOrder(got, seq); err != nil {
			t.Fatal(err)
		}
	})
}

// heartbeats records the Member of every Heartbeat a relay makes.
type heartbeats struct {
	*memory.Backend
	mu   sync.Mutex
	seen []outbox.Member
}

func (h *heartbeats) Heartbeat(ctx context.Context, m outbox.Member, ttl time.Duration) ([]outbox.Member, error) {
	h.mu.Lock()
	h.seen = append(h.seen, m)
	h.mu.Unlock()
	return h.Backend.Heartbeat(ctx, m, ttl)
}

func (h *heartbeats) last() (outbox.Member, int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.seen) == 0 {
		return outbox.Member{}, 0
	}
	return h.seen[len(h.seen)-1], len(h.seen)
}

// TestRelayHeartbeatsSayWhichRelay: every heartbeat carries the machine's
// host name, RelayOptions.Version and the relay's start time.
func TestRelayHeartbeatsSayWhichRelay(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := &heartbeats{Backend: memory.New(memory.Options{})}
		host, err := os.Hostname()
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Hour) // the relay's start is not the bubble's
		start := time.Now()
		startRelay(t, store, &recorder{}, outbox.RelayOptions{Version: "v1.2.3-test", LeaseTTL: 3 * time.Second})
		waitFor(t, time.Minute, "three heartbeats", func() bool { _, n := store.last(); return n >= 3 })
		m, _ := store.last()
		if m.Host != host || m.Version != "v1.2.3-test" || !m.Started.Equal(start) {
			t.Fatalf("heartbeat: Host %q, Version %q, Started %v; want %q, %q, %v", m.Host, m.Version, m.Started, host, "v1.2.3-test", start)
		}
		if len(m.Partitions) != 1 {
			t.Errorf("heartbeat Partitions %v, want the one partition held", m.Partitions)
		}
	})
}

// flakyPauser is the memory backend whose Paused fails while down is set.
type flakyPauser struct {
	*memory.Backend
	down atomic.Bool
}

func (f *flakyPauser) Paused(ctx context.Context) (outbox.Paused, error) {
	if f.down.Load() {
		return outbox.Paused{}, errors.New("injected: the store does not answer")
	}
	return f.Backend.Paused(ctx)
}

// TestRelayKeepsTheLastKnownPausesWhenReadingFails: while Paused fails the
// relay keeps the pauses it last read (the gauge still shows the paused
// topic) and logs the failure once; it logs once more when reading works
// again.
func TestRelayKeepsTheLastKnownPausesWhenReadingFails(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := &flakyPauser{Backend: memory.New(memory.Options{})}
		if err := store.PauseTopic(context.Background(), "orders"); err != nil {
			t.Fatal(err)
		}
		reader := sdkmetric.NewManualReader()
		var logs lockedBuffer
		startRelay(t, store, &recorder{}, outbox.RelayOptions{
			PollInterval:  10 * time.Millisecond,
			MeterProvider: sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)),
			Logger:        slog.New(slog.NewTextHandler(&logs, nil)),
		})
		time.Sleep(100 * time.Millisecond)
		store.down.Store(true)
		time.Sleep(time.Second) // a hundred failed reads
		synctest.Wait()
		d, _ := collect(t, reader)[outbox.MetricPausedTopic].Data.(metricdata.Gauge[int64])
		if len(d.DataPoints) != 1 || d.DataPoints[0].Value != 1 {
			t.Errorf("%s while reading fails = %+v, want the last known pause of orders", outbox.MetricPausedTopic, d.DataPoints)
		}
		store.down.Store(false)
		time.Sleep(100 * time.Millisecond)
		synctest.Wait()
		out := logs.String()
		for line, want := range map[string]int{
			"level=WARN msg=\"outbox relay: reading the paused topics and partitions failed": 1,
			"reading the paused topics and partitions works again":                           1,
			"outbox relay: topic paused":                                                     1,
			"outbox relay: topic resumed":                                                    0,
		} {
			if n := strings.Count(out, line); n != want {
				t.Errorf("%q logged %d times, want %d:\n%s", line, n, want, out)
			}
		}
	})
}
