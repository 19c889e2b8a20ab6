package outbox

import (
	"context"
	"sync"
	"time"
)

// statsSampler feeds the outbox gauges (MetricPending and the others) from
// a store's Inspector.Stats: lazily, when the metrics are read, and at most
// once per interval however often they are read, so a relay whose metrics
// nobody collects costs the store nothing.
type statsSampler struct {
	insp   Inspector
	every  time.Duration
	now    func() time.Time
	stores *storeLog // the relay's store failures, summarised

	sampling sync.Mutex // held while one Stats call runs

	mu     sync.Mutex
	last   Stats
	lagged time.Duration // the oldest due entry's age at the sample
	at     time.Time     // when last was taken; zero before the first
	tried  time.Time     // when a sample was last attempted
}

// sample takes a sample when the last attempt is older than the interval.
func (s *statsSampler) sample(ctx context.Context) {
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
	st, err := s.insp.Stats(sctx)
	if err != nil {
		s.stores.failed(ctx, opStats, noPartition, began, err)
		return
	}
	s.stores.ok(opStats, noPartition)
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	s.last, s.at, s.lagged = st, now, 0
	if !st.OldestDue.IsZero() {
		s.lagged = max(now.Sub(st.OldestDue), 0)
	}
}

// fresh samples if due and returns the last sample when it is no older
// than three intervals: a stale figure is reported as missing rather than
// as current.
func (s *statsSampler) fresh(ctx context.Context) (Stats, time.Duration, bool) {
	s.sample(ctx)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.at.IsZero() || s.now().Sub(s.at) > 3*s.every {
		return Stats{}, 0, false
	}
	return s.last, s.lagged, true
}

func (s *statsSampler) value(f func(Stats) int64) func(context.Context) (int64, bool) {
	return func(ctx context.Context) (int64, bool) {
		st, _, ok := s.fresh(ctx)
		return f(st), ok
	}
}

func (s *statsSampler) lag(ctx context.Context) (time.Duration, bool) {
	_, lag, ok := s.fresh(ctx)
	return lag, ok
}

// rateLog logs a summary of repeated events at most once per interval.
type rateLog struct {
	every time.Duration

	mu      sync.Mutex
	last    time.Time
	count   int
	partial int // messages in the rounds counted
	first   error
}

// add counts failed of total messages and reports whether to log now,
// with the counts since the last log.
func (l *rateLog) add(now time.Time, failed, total int, err error) (log bool, failures, messages int, sample error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.count == 0 {
		l.first = err
	}
	l.count += failed
	l.partial += total
	if !l.last.IsZero() && now.Sub(l.last) < l.every {
		return false, 0, 0, nil
	}
	failures, messages, sample = l.count, l.partial, l.first
	l.last, l.count, l.partial, l.first = now, 0, 0, nil
	return true, failures, messages, sample
}
