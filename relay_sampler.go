package outbox

import (
	"context"
	"sync"
	"time"
)

// sampler feeds gauges from one store read: lazily, when the metrics are
// read, and at most once per interval however often they are read, so a
// relay whose metrics nobody collects costs the store nothing. A sample
// older than three intervals is reported as missing rather than as
// current. Failed reads go to the relay's store-failure summary under op.
type sampler[T any] struct {
	read   func(context.Context) (T, error)
	op     storeOp
	every  time.Duration
	now    func() time.Time
	stores *storeLog

	sampling sync.Mutex // held while one read runs

	mu    sync.Mutex
	last  T
	at    time.Time // when last was taken; zero before the first
	tried time.Time // when a sample was last attempted
}

// sample reads when the last attempt is older than the interval.
func (s *sampler[T]) sample(ctx context.Context) {
	s.sampling.Lock()
	defer s.sampling.Unlock()
	s.mu.Lock()
	due := s.tried.IsZero() || s.now().Sub(s.tried) >= s.every
	if due {
		s.tried = s.now()
	}
	s.mu.Unlock()
	if !due {
		return
	}
	sctx, cancel := context.WithTimeout(ctx, min(s.every, 10*time.Second))
	defer cancel()
	began := s.now()
	v, err := s.read(sctx)
	if err != nil {
		s.stores.failed(ctx, s.op, noPartition, began, err)
		return
	}
	s.stores.ok(s.op, noPartition)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.last, s.at = v, s.now()
}

// fresh samples if due and returns the last sample and when it was taken;
// ok is false before the first sample and when the last is older than
// three intervals.
func (s *sampler[T]) fresh(ctx context.Context) (v T, at time.Time, ok bool) {
	s.sample(ctx)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.at.IsZero() || s.now().Sub(s.at) > 3*s.every {
		var zero T
		return zero, time.Time{}, false
	}
	return s.last, s.at, true
}

// statsSampler feeds the outbox gauges (MetricPending and the others) from
// a store's Inspector.Stats.
type statsSampler struct {
	*sampler[Stats]
}

func newStatsSampler(insp Inspector, every time.Duration, now func() time.Time, stores *storeLog) *statsSampler {
	return &statsSampler{&sampler[Stats]{read: insp.Stats, op: opStats, every: every, now: now, stores: stores}}
}

func (s *statsSampler) value(f func(Stats) int64) func(context.Context) (int64, bool) {
	return func(ctx context.Context) (int64, bool) {
		st, _, ok := s.fresh(ctx)
		return f(st), ok
	}
}

// lag is the age of the oldest due entry at the last sample (zero when
// none was due).
func (s *statsSampler) lag(ctx context.Context) (time.Duration, bool) {
	st, at, ok := s.fresh(ctx)
	if !ok || st.OldestDue.IsZero() {
		return 0, ok
	}
	return max(at.Sub(st.OldestDue), 0), true
}

// archiveAge feeds MetricArchiveOldestAge from the store's
// ArchiveJanitor.OldestArchived.
type archiveAge struct {
	*sampler[time.Time] // the oldest archived entry's sent time; zero when empty
}

func newArchiveAge(aj ArchiveJanitor, every time.Duration, now func() time.Time, stores *storeLog) *archiveAge {
	read := func(ctx context.Context) (time.Time, error) {
		sent, ok, err := aj.OldestArchived(ctx)
		if err != nil || !ok {
			return time.Time{}, err
		}
		return sent, nil
	}
	return &archiveAge{&sampler[time.Time]{read: read, op: opArchiveAge, every: every, now: now, stores: stores}}
}

// age returns the age of the oldest archived entry now; ok is false when
// the archive is empty or there is no fresh sample.
func (a *archiveAge) age(ctx context.Context) (time.Duration, bool) {
	oldest, _, ok := a.fresh(ctx)
	if !ok || oldest.IsZero() {
		return 0, false
	}
	return max(a.now().Sub(oldest), 0), true
}
