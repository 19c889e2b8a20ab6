package outbox_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/outboxrelay/outbox"
	"github.com/outboxrelay/outbox/backends/memory"
)

// TestRelayRenewsWhilePublishing: a broker slower than three lease TTLs
// does not cost the lease, because renewal does not wait for the round.
func TestRelayRenewsWhilePublishing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New(memory.Options{})
		appendAll(t, b, outbox.Entry{ID: "slow", Topic: "t", Key: "k"})
		sink := outbox.SinkFunc(func(ctx context.Context, e outbox.Entry) error {
			select {
			case <-time.After(10 * time.Second):
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		})
		r := startRelay(t, b, sink, outbox.RelayOptions{LeaseTTL: 3 * time.Second, RenewMargin: time.Second})
		waitFor(t, time.Minute, "the slow entry published and marked", func() bool { return r.Stats().Published == 1 })
		if st := r.Stats(); st.LeaseLosses != 0 {
			t.Fatalf("%d leases lost during a slow publish; the relay must renew while the round is in flight", st.LeaseLosses)
		}
	})
}

// boundedSink is a sink whose messages can land up to bound after Publish
// was cancelled; it records when its context was cancelled.
type boundedSink struct {
	bound     time.Duration
	onPublish func()
	cancelled atomic.Int64 // unix ns
}

func (s *boundedSink) LandingBound() time.Duration { return s.bound }

func (s *boundedSink) Publish(ctx context.Context, msgs []outbox.Entry) []error {
	if s.onPublish != nil {
		s.onPublish()
	}
	<-ctx.Done()
	s.cancelled.Store(time.Now().UnixNano())
	errs := make([]error, len(msgs))
	for i := range errs {
		errs[i] = ctx.Err()
	}
	return errs
}

// TestRelayStopsTrustingTheLeaseByTheSinksLandingBound: when the lease
// cannot be renewed, the publish is cancelled the sink's landing bound
// before the lease's local deadline, so whatever the sink sent lands before
// the lease can pass to another relay.
func TestRelayStopsTrustingTheLeaseByTheSinksLandingBound(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New(memory.Options{})
		appendAll(t, b, outbox.Entry{ID: "e", Topic: "t", Key: "k"})
		store := &renewFails{Store: b}
		sink := &boundedSink{bound: 2 * time.Second, onPublish: func() { store.failRenew.Store(true) }}
		start := time.Now()
		startRelay(t, store, sink, outbox.RelayOptions{LeaseTTL: 5 * time.Second, RenewMargin: time.Second})
		waitFor(t, time.Minute, "the publish cancelled", func() bool { return sink.cancelled.Load() != 0 })
		at := time.Unix(0, sink.cancelled.Load()).Sub(start)
		if at > 3*time.Second {
			t.Fatalf("the publish was cancelled %v after the lease was asked for; with a 5s TTL and a 2s landing bound it must be cut by 3s", at)
		}
	})
}

func TestNewRelayRejectsALeaseShorterThanTheLandingBound(t *testing.T) {
	b := memory.New(memory.Options{})
	_, err := outbox.NewRelay(b, &boundedSink{bound: 30 * time.Second}, outbox.RelayOptions{LeaseTTL: 30 * time.Second, Logger: quiet})
	if err == nil || !strings.Contains(err.Error(), "landing bound") {
		t.Fatalf("NewRelay with a 30s TTL and a 30s landing bound: err = %v, want one naming the landing bound", err)
	}
}

// countingStore counts the store calls that start after stopped is set.
type countingStore struct {
	*memory.Backend
	stopped atomic.Bool
	late    atomic.Int64
}

func (s *countingStore) note() {
	if s.stopped.Load() {
		s.late.Add(1)
	}
}

func (s *countingStore) FindPendingBatch(ctx context.Context, l outbox.Lease, n int) ([]outbox.Entry, error) {
	s.note()
	return s.Backend.FindPendingBatch(ctx, l, n)
}

func (s *countingStore) FetchNext(ctx context.Context, l outbox.Lease, n int, inFlight []outbox.Entry) (outbox.Batch, error) {
	s.note()
	return s.Backend.FetchNext(ctx, l, n, inFlight)
}

func (s *countingStore) MarkSent(ctx context.Context, l outbox.Lease, ids []string) error {
	s.note()
	return s.Backend.MarkSent(ctx, l, ids)
}

func (s *countingStore) MarkFailed(ctx context.Context, l outbox.Lease, f []outbox.Failure) error {
	s.note()
	return s.Backend.MarkFailed(ctx, l, f)
}

func (s *countingStore) Release(ctx context.Context, l outbox.Lease, ids []string) error {
	s.note()
	return s.Backend.Release(ctx, l, ids)
}

func (s *countingStore) RenewLease(ctx context.Context, l outbox.Lease, ttl time.Duration) (outbox.Lease, error) {
	s.note()
	return s.Backend.RenewLease(ctx, l, ttl)
}

func (s *countingStore) ReleaseLease(ctx context.Context, l outbox.Lease) error {
	s.note()
	return s.Backend.ReleaseLease(ctx, l)
}

func (s *countingStore) Heartbeat(ctx context.Context, m outbox.Member, ttl time.Duration) ([]outbox.Member, error) {
	s.note()
	return s.Backend.Heartbeat(ctx, m, ttl)
}

func (s *countingStore) Leave(ctx context.Context, owner string) error {
	s.note()
	return s.Backend.Leave(ctx, owner)
}

// TestRelayStopIsBoundedWithABlockingSink: a sink that ignores its context
// and never returns. Stop with a deadline returns the deadline's error
// within the documented bound (about 2 s after it), after every worker
// exited: no store call starts after Stop returned.
func TestRelayStopIsBoundedWithABlockingSink(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := &countingStore{Backend: memory.New(memory.Options{Partitions: 4})}
		for i := range 8 {
			appendAll(t, b.Backend, outbox.Entry{ID: "e" + string(rune('a'+i)), Topic: "t", Key: string(rune('a' + i))})
		}
		release := make(chan struct{})
		publishing := make(chan struct{}, 8)
		sink := outbox.SinkFunc(func(ctx context.Context, e outbox.Entry) error {
			publishing <- struct{}{}
			<-release // ignores ctx
			return nil
		})
		r, err := outbox.NewRelay(b, sink, outbox.RelayOptions{Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		if err := r.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		<-publishing
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		start := time.Now()
		err = r.Stop(ctx)
		took := time.Since(start)
		b.stopped.Store(true)
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Stop = %v, want the deadline's error", err)
		}
		if took > 100*time.Millisecond+2*time.Second {
			t.Fatalf("Stop took %v with a 100ms deadline; the documented bound is about 2s after it", took)
		}
		close(release) // the abandoned publishes return now
		time.Sleep(time.Minute)
		synctest.Wait()
		if n := b.late.Load(); n != 0 {
			t.Fatalf("%d store calls started after Stop returned", n)
		}
	})
}

// blockingReleaseStore's ReleaseLease blocks until its context ends once
// block is set, as a store that stopped answering does.
type blockingReleaseStore struct {
	*memory.Backend
	block     atomic.Bool
	releasing chan struct{}
}

func (s *blockingReleaseStore) ReleaseLease(ctx context.Context, l outbox.Lease) error {
	if !s.block.Load() {
		return s.Backend.ReleaseLease(ctx, l)
	}
	select {
	case s.releasing <- struct{}{}:
	default:
	}
	<-ctx.Done()
	return ctx.Err()
}

// TestRelayStopIsBoundedWithABlockingRelease: the final ReleaseLease starts
// while the relay drains (before Stop's context ends) and the store never
// answers. Stop must still return within the documented bound of its
// context's end: the release's own timeout is cut at the hard stop.
func TestRelayStopIsBoundedWithABlockingRelease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := &blockingReleaseStore{Backend: memory.New(memory.Options{Partitions: 1}), releasing: make(chan struct{}, 1)}
		r, err := outbox.NewRelay(b, outbox.SinkFunc(func(context.Context, outbox.Entry) error { return nil }), outbox.RelayOptions{Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		if err := r.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		for i := 0; r.Stats().PartitionsHeld != 1; i++ {
			if i == 600 {
				t.Fatal("the relay did not lease its partition within a minute")
			}
			time.Sleep(100 * time.Millisecond) // the bubble's clock
		}
		b.block.Store(true)
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		start := time.Now()
		err = r.Stop(ctx)
		took := time.Since(start)
		select {
		case <-b.releasing:
		default:
			t.Fatal("the relay never released its lease")
		}
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Stop = %v, want the deadline's error", err)
		}
		if took > 100*time.Millisecond+2*time.Second {
			t.Fatalf("Stop took %v with a 100ms deadline and a store that does not answer; the documented bound is about 2s after it", took)
		}
	})
}

// fetchCountingStore counts fetches and renewals.
type fetchCountingStore struct {
	*memory.Backend
	fetches, renewals atomic.Int64
}

func (s *fetchCountingStore) FindPendingBatch(ctx context.Context, l outbox.Lease, n int) ([]outbox.Entry, error) {
	s.fetches.Add(1)
	return s.Backend.FindPendingBatch(ctx, l, n)
}

func (s *fetchCountingStore) FetchNext(ctx context.Context, l outbox.Lease, n int, inFlight []outbox.Entry) (outbox.Batch, error) {
	s.fetches.Add(1)
	return s.Backend.FetchNext(ctx, l, n, inFlight)
}

func (s *fetchCountingStore) RenewLease(ctx context.Context, l outbox.Lease, ttl time.Duration) (outbox.Lease, error) {
	s.renewals.Add(1)
	return s.Backend.RenewLease(ctx, l, ttl)
}

// TestRelayIdlePartitionFetchesAtPollInterval: with a lease that renews
// often (LeaseTTL 300ms, renewed every 200ms) and a PollInterval of a
// minute, an idle partition is fetched at the start and then only at the
// poll or on a wake-up, not after every renewal.
func TestRelayIdlePartitionFetchesAtPollInterval(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := &fetchCountingStore{Backend: memory.New(memory.Options{Partitions: 1})}
		r, err := outbox.NewRelay(b, outbox.SinkFunc(func(context.Context, outbox.Entry) error { return nil }),
			outbox.RelayOptions{Logger: quiet, LeaseTTL: 300 * time.Millisecond, PollInterval: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		if err := r.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		defer func() { _ = r.Stop(context.Background()) }()
		time.Sleep(10 * time.Second) // the bubble's clock
		synctest.Wait()
		fetches, renewals := b.fetches.Load(), b.renewals.Load()
		if renewals < 20 {
			t.Fatalf("%d renewals in 10s of a 300ms lease; the test needs the lease to renew", renewals)
		}
		if fetches != 1 {
			t.Fatalf("%d fetches in 10s with PollInterval 1m and %d renewals: an idle partition must be fetched at the poll or on a wake-up only", fetches, renewals)
		}
		r.Notify()
		time.Sleep(100 * time.Millisecond)
		synctest.Wait()
		if n := b.fetches.Load(); n != 2 {
			t.Fatalf("%d fetches after a wake-up, want 2", n)
		}
	})
}
