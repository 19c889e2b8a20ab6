package outbox_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/outboxrelay/outbox"
	"github.com/outboxrelay/outbox/backends/memory"
	"github.com/outboxrelay/outbox/backoff"
)

// prefetchLog is the memory backend (an outbox.Prefetcher) that logs the
// calls the relay makes for its batches, in the order they return.
type prefetchLog struct {
	*memory.Backend

	mu       sync.Mutex
	fetches  int            // FindPendingBatch calls
	sent     map[string]int // ID -> how many publishes had returned when it was marked sent
	next     [][]string     // in flight at each FetchNext
	ahead    [][]string     // what each FetchNext returned
	released [][]string
	sink     *recorder
}

func (s *prefetchLog) FindPendingBatch(ctx context.Context, l outbox.Lease, limit int) ([]outbox.Entry, error) {
	s.mu.Lock()
	s.fetches++
	s.mu.Unlock()
	return s.Backend.FindPendingBatch(ctx, l, limit)
}

func (s *prefetchLog) FetchNext(ctx context.Context, l outbox.Lease, limit int, inFlight []outbox.Entry) (outbox.Batch, error) {
	b, err := s.Backend.FetchNext(ctx, l, limit, inFlight)
	s.mu.Lock()
	s.next = append(s.next, idsOf(inFlight))
	s.ahead = append(s.ahead, idsOf(b.Entries))
	s.mu.Unlock()
	return b, err
}

func (s *prefetchLog) MarkSent(ctx context.Context, l outbox.Lease, ids []string) error {
	err := s.Backend.MarkSent(ctx, l, ids)
	n := len(s.sink.snapshot())
	s.mu.Lock()
	for _, id := range ids {
		s.sent[id] = n
	}
	s.mu.Unlock()
	return err
}

func (s *prefetchLog) Release(ctx context.Context, l outbox.Lease, ids []string) error {
	s.mu.Lock()
	s.released = append(s.released, slices.Clone(ids))
	s.mu.Unlock()
	return s.Backend.Release(ctx, l, ids)
}

// With a store that is a Prefetcher, the relay claims each batch behind a
// full one while it publishes that one (FetchNext, with the batch in
// flight), and publishes it only after the batch before it was marked
// sent: a crash never has more than one batch published and unrecorded.
func TestRelayPublishesBatchesFetchedAheadAfterTheBatchBefore(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sink := &recorder{}
		s := &prefetchLog{Backend: memory.New(memory.Options{}), sent: map[string]int{}, sink: sink}
		const n, batch = 50, 10
		var all []outbox.Entry
		for i := range n {
			all = append(all, outbox.Entry{ID: fmt.Sprintf("e%02d", i), Topic: "t", Key: fmt.Sprint("k", i%7)})
		}
		appendAll(t, s.Backend, all...)
		startRelay(t, s, sink, outbox.RelayOptions{BatchSize: batch})
		waitFor(t, time.Minute, "every entry marked sent", func() bool {
			s.mu.Lock()
			defer s.mu.Unlock()
			return len(s.sent) == n
		})
		got := idsOf(sink.snapshot())
		if !slices.Equal(got, idsOf(all)) {
			t.Fatalf("published %v, want every entry once, in append order", got)
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		if len(s.next) < n/batch-1 {
			t.Fatalf("FetchNext was called %d times, want at least %d (once behind each full batch but the last)", len(s.next), n/batch-1)
		}
		for i, inFlight := range s.next {
			if want := idsOf(all[i*batch : (i+1)*batch]); !slices.Equal(inFlight, want) {
				t.Fatalf("FetchNext call %d had %v in flight, want batch %d, %v", i+1, inFlight, i+1, want)
			}
		}
		// Entry j is published as the j-th; every entry of an earlier
		// batch must have been marked sent before that.
		for j := batch; j < n; j++ {
			for i := 0; i < j/batch*batch; i++ {
				if s.sent[all[i].ID] > j {
					t.Fatalf("%s (batch %d) was published before %s (batch %d) was marked sent", all[j].ID, j/batch+1, all[i].ID, i/batch+1)
				}
			}
		}
		if len(s.released) > 0 {
			t.Fatalf("released %v; every batch ended clean", s.released)
		}
	})
}

// When an entry of the batch in flight fails, the batch fetched ahead was
// claimed before the failure held its key back: the relay gives it back
// unattempted (Release) and fetches again, so the key's later entry waits
// for the retry, as without the fetch ahead.
func TestRelayGivesBackTheBatchFetchedAheadWhenTheBatchBeforeFails(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sink := &recorder{fail: func(e outbox.Entry, attempt int) error {
			if e.ID == "a1" && attempt == 1 {
				return errors.New("broker unreachable")
			}
			return nil
		}}
		s := &prefetchLog{Backend: memory.New(memory.Options{}), sent: map[string]int{}, sink: sink}
		appendAll(t, s.Backend,
			outbox.Entry{ID: "a1", Topic: "t", Key: "a"}, outbox.Entry{ID: "b1", Topic: "t", Key: "b"},
			outbox.Entry{ID: "a2", Topic: "t", Key: "a"}, outbox.Entry{ID: "b2", Topic: "t", Key: "b"})
		startRelay(t, s, sink, outbox.RelayOptions{BatchSize: 2,
			Backoff: backoff.Policy{Base: time.Second, Max: time.Second, Min: time.Second}})
		waitFor(t, time.Minute, "every entry marked sent", func() bool {
			s.mu.Lock()
			defer s.mu.Unlock()
			return len(s.sent) == 4
		})
		if got := idsOf(sink.snapshot()); !slices.Equal(got, []string{"b1", "b2", "a1", "a2"}) {
			t.Fatalf("delivered %v, want b1 b2 a1 a2: b's entries go on, a2 waits for a1's retry", got)
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		if len(s.next) == 0 || !slices.Equal(s.next[0], []string{"a1", "b1"}) {
			t.Fatalf("FetchNext calls had %v in flight, want a1 b1 first", s.next)
		}
		// The fetch ahead ran while a1 was published: before its failure
		// was recorded it got a2 b2, after it only b2 (a1 holds a2 back).
		if got := s.ahead[0]; !slices.Equal(got, []string{"a2", "b2"}) && !slices.Equal(got, []string{"b2"}) {
			t.Fatalf("the fetch ahead returned %v, want a2 b2 or b2", got)
		}
		if len(s.released) == 0 || !slices.Equal(s.released[0], s.ahead[0]) {
			t.Fatalf("released %v, want the batch fetched ahead, %v, first", s.released, s.ahead[0])
		}
		info, err := s.Lookup(context.Background(), "a2")
		if err == nil {
			t.Fatalf("a2 is still in the store: %+v", info)
		}
		sink.mu.Lock()
		defer sink.mu.Unlock()
		if st := sink.attempts; st["a2"] != 1 || st["b2"] != 1 {
			t.Fatalf("attempts a2 %d, b2 %d; the batch fetched ahead must be given back unattempted and published once", st["a2"], st["b2"])
		}
	})
}

// A fetch ahead that finds nothing due ends the drain like a short batch:
// the worker waits for a wake-up or the poll instead of fetching again.
func TestRelayWaitsAfterAFetchAheadFindsNothing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sink := &recorder{}
		s := &prefetchLog{Backend: memory.New(memory.Options{}), sent: map[string]int{}, sink: sink}
		for i := range 10 {
			appendAll(t, s.Backend, outbox.Entry{ID: fmt.Sprint("e", i), Topic: "t", Key: fmt.Sprint("k", i)})
		}
		startRelay(t, s, sink, outbox.RelayOptions{BatchSize: 10, PollInterval: time.Hour})
		waitFor(t, time.Minute, "every entry marked sent", func() bool {
			s.mu.Lock()
			defer s.mu.Unlock()
			return len(s.sent) == 10
		})
		time.Sleep(time.Second) // well before the lease's renewal, which fetches too
		synctest.Wait()
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.fetches != 1 || len(s.next) != 1 {
			t.Fatalf("%d fetches and %d fetches ahead in the second after the drain; want 1 and 1 (the full batch, then the fetch ahead that found nothing, then a wait)", s.fetches, len(s.next))
		}
	})
}
