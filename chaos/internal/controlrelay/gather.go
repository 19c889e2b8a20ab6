package controlrelay

import (
	"context"
	"sync"
	"time"

	"github.com/outboxrelay/outbox"
)

// backend is what the relay uses of a store: both backends implement all
// of it, and a wrapper must pass each of it on to leave the relay's
// behaviour (fleet sharing, notifications, the fetch path) as it is.
type backend interface {
	outbox.Store
	outbox.BatchFetcher
	outbox.Membership
	outbox.Notifier
}

// gatheringStore fetches each partition at most once per gather, unless
// the partition's last fetch filled the batch: a fetch asked for sooner
// finds nothing due, without a store call, so the entries appended
// meanwhile pile up into the next batch. Everything else goes to the
// backend as it is.
type gatheringStore struct {
	backend
	gather time.Duration
	now    func() time.Time

	mu   sync.Mutex
	last map[int]gathered // by partition
}

// gathered is a partition's last fetch.
type gathered struct {
	at   time.Time
	full bool
}

func newGatheringStore(b backend, gather time.Duration) *gatheringStore {
	return &gatheringStore{backend: b, gather: gather, now: time.Now, last: map[int]gathered{}}
}

// due reports whether partition p may be fetched now, and if so records
// the fetch as starting now.
func (s *gatheringStore) due(p int) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	if g, ok := s.last[p]; ok && !g.full && now.Sub(g.at) < s.gather {
		return false
	}
	s.last[p] = gathered{at: now}
	return true
}

// fetched records whether partition p's fetch filled the batch.
func (s *gatheringStore) fetched(p int, full bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	g := s.last[p]
	g.full = full
	s.last[p] = g
}

// FetchBatch implements [outbox.BatchFetcher].
func (s *gatheringStore) FetchBatch(ctx context.Context, lease outbox.Lease, limit int) (outbox.Batch, error) {
	if !s.due(lease.Partition) {
		return outbox.Batch{}, nil
	}
	b, err := s.backend.FetchBatch(ctx, lease, limit)
	if err == nil {
		s.fetched(lease.Partition, len(b.Entries)+len(b.Parked) >= limit)
	}
	return b, err
}

// FindPendingBatch implements [outbox.Store], gathering as FetchBatch does.
func (s *gatheringStore) FindPendingBatch(ctx context.Context, lease outbox.Lease, limit int) ([]outbox.Entry, error) {
	if !s.due(lease.Partition) {
		return nil, nil
	}
	es, err := s.backend.FindPendingBatch(ctx, lease, limit)
	if err == nil {
		s.fetched(lease.Partition, len(es) >= limit)
	}
	return es, err
}
