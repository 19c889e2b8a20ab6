package outbox_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/outboxrelay/outbox"
	"github.com/outboxrelay/outbox/backends/memory"
	"github.com/outboxrelay/outbox/backoff"
)

var quiet = slog.New(slog.DiscardHandler)

// recorder is a sink that records deliveries and fails on demand.
type recorder struct {
	mu        sync.Mutex
	delivered []outbox.Entry
	calls     int
	fail      func(e outbox.Entry, attempt int) error // nil: succeed
	attempts  map[string]int
	inFlight  map[string]bool // keys being published right now
	violation string
}

func (s *recorder) Publish(ctx context.Context, msgs []outbox.Entry) []error {
	s.mu.Lock()
	s.calls++
	if s.attempts == nil {
		s.attempts, s.inFlight = map[string]int{}, map[string]bool{}
	}
	for _, m := range msgs {
		if m.Key != "" && s.inFlight[m.Key] {
			s.violation = "two entries of key " + m.Key + " in flight at once"
		}
		s.inFlight[m.Key] = true
	}
	s.mu.Unlock()

	errs := make([]error, len(msgs))
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, m := range msgs {
		delete(s.inFlight, m.Key)
		s.attempts[m.ID]++
		if s.fail != nil {
			errs[i] = s.fail(m, s.attempts[m.ID])
		}
		if errs[i] == nil {
			s.delivered = append(s.delivered, m)
		}
	}
	return errs
}

func (s *recorder) snapshot() []outbox.Entry {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.delivered)
}

func appendAll(t *testing.T, b *memory.Backend, entries ...outbox.Entry) {
	t.Helper()
	tx := b.Begin()
	if err := b.AppendInTx(context.Background(), tx, entries...); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
}

func startRelay(t *testing.T, b outbox.Store, sink outbox.Sink, o outbox.RelayOptions) *outbox.Relay {
	t.Helper()
	if o.Logger == nil {
		o.Logger = quiet
	}
	r, err := outbox.NewRelay(b, sink, o)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Stop(context.Background()) })
	return r
}

// waitFor advances the bubble's clock until cond holds or limit passes.
func waitFor(t *testing.T, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", limit, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// checkKeyOrder reports the first key whose first deliveries are out of
// append order. seq maps an ID to its append position.
func checkKeyOrder(delivered []outbox.Entry, seq map[string]int) error {
	last := map[string]int{}
	seen := map[string]bool{}
	for _, e := range delivered {
		if seen[e.ID] || e.Key == "" {
			continue
		}
		seen[e.ID] = true
		if p, ok := last[e.Key]; ok && seq[e.ID] < p {
			return fmt.Errorf("key %s: %s (append #%d) delivered after append #%d", e.Key, e.ID, seq[e.ID], p)
		}
		last[e.Key] = seq[e.ID]
	}
	return nil
}

func TestRelayDeliversInKeyOrderThroughFailures(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New(memory.Options{Partitions: 3})
		seq := map[string]int{}
		var entries []outbox.Entry
		for i := range 300 {
			id := fmt.Sprintf("e%03d", i)
			seq[id] = i
			entries = append(entries, outbox.Entry{ID: id, Topic: "t", Key: fmt.Sprintf("k%d", i%7)})
		}
		for i := 0; i < len(entries); i += 50 {
			appendAll(t, b, entries[i:i+50]...)
		}
		sink := &recorder{fail: func(e outbox.Entry, attempt int) error {
			switch {
			case e.ID == "e013" || e.ID == "e150":
				return backoff.Permanent(errors.New("rejected by the broker"))
			case attempt == 1 && (seq[e.ID]%5 == 0):
				return errors.New("transient hiccup")
			}
			return nil
		}}
		r := startRelay(t, b, sink, outbox.RelayOptions{
			BatchSize: 40, MaxInFlight: 16, PollInterval: 50 * time.Millisecond,
			Backoff:          backoff.Policy{Base: 20 * time.Millisecond, Max: 100 * time.Millisecond},
			BreakerThreshold: -1,
		})
		waitFor(t, time.Minute, "all non-poison entries delivered", func() bool { return len(sink.snapshot()) >= 298 })
		synctest.Wait()

		got := sink.snapshot()
		if len(got) != 298 {
			t.Fatalf("delivered %d entries, want 298 (300 minus 2 parked)", len(got))
		}
		if err := checkKeyOrder(got, seq); err != nil {
			t.Fatal(err)
		}
		if sink.violation != "" {
			t.Fatal(sink.violation)
		}
		parked, err := b.Parked(context.Background(), "", 10)
		if err != nil {
			t.Fatal(err)
		}
		if len(parked) != 2 || parked[0].ID != "e013" || parked[1].ID != "e150" || parked[0].Attempts != 1 ||
			!strings.Contains(parked[0].LastError, "rejected by the broker") {
			t.Fatalf("parked = %+v, want e013 and e150 with their error", parked)
		}
		st := r.Stats()
		if st.Published != 298 || st.Parked != 2 || st.Retried != 59 {
			t.Fatalf("stats = %+v, want 298 published, 2 parked, 59 retried (every 5th fails once; e150 is permanent)", st)
		}
	})
}

func TestRelayDeliversScheduledEntriesOnTime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New(memory.Options{})
		start := time.Now()
		appendAll(t, b,
			outbox.Entry{ID: "later", Topic: "t", Key: "k", NotBefore: start.Add(time.Hour)},
			outbox.Entry{ID: "now", Topic: "t", Key: "k"},
		)
		var mu sync.Mutex
		at := map[string]time.Time{}
		sink := outbox.SinkFunc(func(_ context.Context, e outbox.Entry) error {
			mu.Lock()
			at[e.ID] = time.Now()
			mu.Unlock()
			return nil
		})
		startRelay(t, b, sink, outbox.RelayOptions{PollInterval: time.Second})
		waitFor(t, 2*time.Hour, "the scheduled entry", func() bool { mu.Lock(); defer mu.Unlock(); return len(at) == 2 })
		if d := at["now"].Sub(start); d > time.Second {
			t.Errorf("the immediate entry waited %v behind a scheduled one of its key", d)
		}
		if d := at["later"].Sub(start); d < time.Hour || d > time.Hour+time.Second {
			t.Errorf("the scheduled entry was delivered after %v, want 1h (+ at most one poll interval)", d)
		}
	})
}

func TestRelayNotifyWakesIdleWorkers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New(memory.Options{})
		sink := &recorder{}
		r := startRelay(t, b, sink, outbox.RelayOptions{PollInterval: time.Hour})
		synctest.Wait() // the worker found nothing and sleeps for an hour
		start := time.Now()
		appendAll(t, b, outbox.Entry{Topic: "t", Key: "k"})
		r.Notify()
		waitFor(t, time.Minute, "delivery after Notify", func() bool { return len(sink.snapshot()) == 1 })
		if d := time.Since(start); d > 100*time.Millisecond {
			t.Fatalf("delivery took %v after Notify; the poll interval is 1h", d)
		}
	})
}

func TestRelayWakesOnBackendNotifications(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New(memory.Options{})
		sink := &recorder{}
		startRelay(t, b, sink, outbox.RelayOptions{PollInterval: time.Hour})
		synctest.Wait()
		start := time.Now()
		appendAll(t, b, outbox.Entry{Topic: "t", Key: "k"}) // memory.Backend is a Notifier
		waitFor(t, time.Minute, "delivery after commit", func() bool { return len(sink.snapshot()) == 1 })
		if d := time.Since(start); d > 100*time.Millisecond {
			t.Fatalf("delivery took %v after commit; the poll interval is 1h", d)
		}
	})
}

func TestRelayBreakerStopsBurningAttempts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New(memory.Options{})
		for i := range 10 {
			appendAll(t, b, outbox.Entry{ID: fmt.Sprint("e", i), Topic: "t", Key: fmt.Sprint("k", i)})
		}
		var down atomic.Bool
		down.Store(true)
		sink := &recorder{fail: func(outbox.Entry, int) error {
			if down.Load() {
				return errors.New("broker unreachable")
			}
			return nil
		}}
		startRelay(t, b, sink, outbox.RelayOptions{
			BatchSize: 1, PollInterval: 10 * time.Millisecond,
			Backoff:          backoff.Policy{Base: time.Millisecond, Max: time.Millisecond, Min: time.Millisecond, MaxAttempts: -1},
			BreakerThreshold: 3, BreakerCooldown: time.Minute,
		})
		time.Sleep(30 * time.Second) // half a cooldown
		synctest.Wait()
		sink.mu.Lock()
		calls := sink.calls
		sink.mu.Unlock()
		if calls != 3 {
			t.Fatalf("sink called %d times in 30s with the breaker at 3 failures / 1m cooldown, want 3", calls)
		}
		down.Store(false)
		waitFor(t, 5*time.Minute, "recovery after the cooldown", func() bool { return len(sink.snapshot()) == 10 })
	})
}

func TestRelayStopReleasesLeases(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New(memory.Options{Partitions: 4})
		r := startRelay(t, b, &recorder{}, outbox.RelayOptions{LeaseTTL: time.Hour})
		waitFor(t, time.Minute, "all leases held", func() bool { return r.Stats().PartitionsHeld == 4 })
		if err := r.Stop(context.Background()); err != nil {
			t.Fatal(err)
		}
		for p := range 4 {
			if _, err := b.AcquireLease(context.Background(), p, "next", time.Minute); err != nil {
				t.Fatalf("partition %d still leased after Stop: %v", p, err)
			}
		}
		if err := r.Start(context.Background()); !errors.Is(err, outbox.ErrClosed) {
			t.Fatalf("Start after Stop = %v, want ErrClosed", err)
		}
	})
}

func TestRelayStopDrainsTheBatchInFlight(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New(memory.Options{})
		for i := range 5 {
			appendAll(t, b, outbox.Entry{ID: fmt.Sprint("e", i), Topic: "t", Key: fmt.Sprint("k", i)})
		}
		publishing := make(chan struct{})
		sink := outbox.SinkFunc(func(ctx context.Context, e outbox.Entry) error {
			if e.ID == "e0" {
				close(publishing)
			}
			time.Sleep(time.Second) // a slow broker
			return nil
		})
		r := startRelay(t, b, sink, outbox.RelayOptions{})
		<-publishing
		if err := r.Stop(context.Background()); err != nil {
			t.Fatal(err)
		}
		st, err := b.Stats(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if st.Pending != 0 || r.Stats().Published != 5 {
			t.Fatalf("after Stop: %d pending, %d published; the batch in flight should have been finished", st.Pending, r.Stats().Published)
		}
	})
}

// TestRelayLosingTheLeaseMidBatchAbortsIt: the store stops answering
// renewals while a round is in flight on a broker that hangs and ignores
// its context. The relay cancels the publish when its lease's local
// deadline passes, abandons the sink a second later, records nothing, and
// the next holder gets the whole unfinished batch back in order.
func TestRelayLosingTheLeaseMidBatchAbortsIt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New(memory.Options{})
		for i := range 4 {
			appendAll(t, b, outbox.Entry{ID: fmt.Sprint("e", i), Topic: "t", Key: "k"}) // one key: 4 rounds
		}
		store := &renewFails{Store: b}
		var calls atomic.Int32
		takenOver := make(chan struct{})
		cancelled := make(chan time.Time, 1)
		sink := outbox.SinkFunc(func(ctx context.Context, e outbox.Entry) error {
			if calls.Add(1) == 1 {
				store.failRenew.Store(true)
				<-ctx.Done()
				cancelled <- time.Now()
				<-takenOver // a broker that hangs past the lease and ignores ctx
			}
			return nil
		})
		start := time.Now()
		r := startRelay(t, store, sink, outbox.RelayOptions{LeaseTTL: 3 * time.Second, RenewMargin: time.Second, Owner: "stale"})
		if at := (<-cancelled).Sub(start); at > 3*time.Second {
			t.Fatalf("the publish was cancelled %v after the lease was taken; it must be cut at the lease's local deadline (3s)", at)
		}
		time.Sleep(2 * time.Second) // the lease has expired in the store too
		l, err := b.AcquireLease(context.Background(), 0, "new", time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		waitFor(t, time.Minute, "the stale relay giving the lease up", func() bool { return r.Stats().PartitionsHeld == 0 })
		close(takenOver)
		synctest.Wait()
		if calls.Load() != 1 {
			t.Fatalf("the stale relay published %d times; it must stop at the first round once its lease is gone", calls.Load())
		}
		// The new holder gets the whole unfinished batch back, in order:
		// nothing of it was recorded by the stale relay.
		got, err := b.FindPendingBatch(context.Background(), l, 10)
		if err != nil {
			t.Fatal(err)
		}
		if ids := fmt.Sprint(idsOf(got)); ids != "[e0 e1 e2 e3]" {
			t.Fatalf("the new holder fetched %s, want [e0 e1 e2 e3]", ids)
		}
	})
}

// renewFails wraps a Store (only the Store methods, so a relay on it does
// not balance) and fails renewals and acquisitions on demand, as a store
// the relay cannot reach would.
type renewFails struct {
	outbox.Store
	failRenew atomic.Bool
}

func (s *renewFails) RenewLease(ctx context.Context, l outbox.Lease, ttl time.Duration) (outbox.Lease, error) {
	if s.failRenew.Load() {
		return outbox.Lease{}, errors.New("flaky: the store does not answer")
	}
	return s.Store.RenewLease(ctx, l, ttl)
}

func (s *renewFails) AcquireLease(ctx context.Context, p int, owner string, ttl time.Duration) (outbox.Lease, error) {
	if s.failRenew.Load() {
		return outbox.Lease{}, errors.New("flaky: the store does not answer")
	}
	return s.Store.AcquireLease(ctx, p, owner, ttl)
}

func idsOf(entries []outbox.Entry) []string {
	ids := make([]string, len(entries))
	for i, e := range entries {
		ids[i] = e.ID
	}
	return ids
}

func TestRelaysShareWithMaxPartitions(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New(memory.Options{Partitions: 4})
		o := outbox.RelayOptions{MaxPartitions: 2, AcquireInterval: 100 * time.Millisecond}
		o.Owner = "a"
		a := startRelay(t, b, &recorder{}, o)
		o.Owner = "b"
		bb := startRelay(t, b, &recorder{}, o)
		waitFor(t, time.Minute, "both relays holding two partitions", func() bool {
			return a.Stats().PartitionsHeld == 2 && bb.Stats().PartitionsHeld == 2
		})
	})
}

// TestRelayWithMaxPartitionsFindsAFreePartitionAtOnce: 15 of 16
// partitions are leased by another owner. A relay with MaxPartitions 1 has
// a worker per partition racing for its one slot; a worker that wins the
// slot for a held partition gives it back, and the others must try their
// partitions at once, not after AcquireInterval (an hour here).
func TestRelayWithMaxPartitionsFindsAFreePartitionAtOnce(t *testing.T) {
	for i := range 5 {
		synctest.Test(t, func(t *testing.T) {
			b := memory.New(memory.Options{Partitions: 16})
			free := i % 16
			for p := range 16 {
				if p != free {
					if _, err := b.AcquireLease(context.Background(), p, "other", 24*time.Hour); err != nil {
						t.Fatal(err)
					}
				}
			}
			r := startRelay(t, b, &recorder{}, outbox.RelayOptions{Owner: "r", MaxPartitions: 1, AcquireInterval: time.Hour})
			waitFor(t, time.Second, fmt.Sprintf("the relay holding the free partition %d", free), func() bool {
				return r.Stats().PartitionsHeld == 1
			})
		})
	}
}

func TestRelayUnorderedPublishesAKeyConcurrently(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New(memory.Options{})
		for range 6 {
			appendAll(t, b, outbox.Entry{Topic: "t", Key: "same"})
		}
		sink := &recorder{}
		startRelay(t, b, sink, outbox.RelayOptions{Unordered: true})
		waitFor(t, time.Minute, "delivery", func() bool { return len(sink.snapshot()) == 6 })
		sink.mu.Lock()
		defer sink.mu.Unlock()
		if sink.calls != 1 {
			t.Fatalf("unordered relay used %d publish calls for one key's 6 entries, want 1", sink.calls)
		}
	})
}

func TestNewRelayRejectsBadOptions(t *testing.T) {
	t.Parallel()
	b := memory.New(memory.Options{Partitions: 2})
	for _, tc := range []struct {
		name string
		o    outbox.RelayOptions
		want string
	}{
		{"margin", outbox.RelayOptions{LeaseTTL: time.Second, RenewMargin: 2 * time.Second}, "RenewMargin"},
		{"batch", outbox.RelayOptions{BatchSize: -1}, "BatchSize"},
		{"partition", outbox.RelayOptions{Partitions: []int{2}}, "out of range"},
		{"repeat", outbox.RelayOptions{Partitions: []int{1, 1}}, "repeated"},
		{"backoff", outbox.RelayOptions{Backoff: backoff.Policy{Base: -1}}, "Backoff"},
	} {
		if _, err := outbox.NewRelay(b, &recorder{}, tc.o); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v, want one naming %q", tc.name, err, tc.want)
		}
	}
	if _, err := outbox.NewRelay(nil, &recorder{}, outbox.RelayOptions{}); err == nil {
		t.Error("a nil store must be rejected")
	}
}

// flakyStore fails chosen calls of a real backend, to exercise the relay's
// handling of store errors.
type flakyStore struct {
	*memory.Backend
	failMarkSent atomic.Int32 // fail this many MarkSent calls
}

func (s *flakyStore) MarkSent(ctx context.Context, l outbox.Lease, ids []string) error {
	if len(ids) > 0 && s.failMarkSent.Add(-1) >= 0 {
		return errors.New("connection reset by peer")
	}
	return s.Backend.MarkSent(ctx, l, ids)
}

// When outcomes cannot be recorded the relay gives the lease up; the same
// relay acquiring it again must get the abandoned claims back, not a lease
// under which they stay claimed forever.
func TestRelayRecoversClaimsAfterAbandoningALease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := &flakyStore{Backend: memory.New(memory.Options{})}
		s.failMarkSent.Store(4) // more than the relay's retries of one write
		for i := range 3 {
			appendAll(t, s.Backend, outbox.Entry{ID: fmt.Sprint("e", i), Topic: "t", Key: fmt.Sprint("k", i)})
		}
		sink := &recorder{}
		startRelay(t, s, sink, outbox.RelayOptions{PollInterval: 100 * time.Millisecond, AcquireInterval: 100 * time.Millisecond})
		waitFor(t, time.Minute, "every entry marked sent", func() bool {
			st, err := s.Stats(context.Background())
			return err == nil && st.Pending == 0
		})
		if n := len(sink.snapshot()); n != 6 {
			t.Fatalf("%d deliveries, want 6: each entry once before the failed MarkSent and once more after", n)
		}
	})
}

// A previous run with the same Owner may have left claims behind under a
// lease that is still live; the new run must get them back.
func TestRelayRestartWithTheSameOwnerGetsLeftoverClaims(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New(memory.Options{})
		appendAll(t, b, outbox.Entry{ID: "e0", Topic: "t", Key: "k"})
		l, err := b.AcquireLease(context.Background(), 0, "pod-1", time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		if got, err := b.FindPendingBatch(context.Background(), l, 10); err != nil || len(got) != 1 {
			t.Fatalf("claim: %v, %v", got, err)
		}
		// The previous process died here, its lease live for another hour.
		sink := &recorder{}
		startRelay(t, b, sink, outbox.RelayOptions{Owner: "pod-1"})
		waitFor(t, time.Minute, "the left-over claim delivered", func() bool { return len(sink.snapshot()) == 1 })
	})
}
