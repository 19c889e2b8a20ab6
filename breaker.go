package outbox

import (
	"sync"
	"sync/atomic"
	"time"
)

// Breaker states, as MetricBreakerState reports them.
const (
	breakerClosed   = 0
	breakerOpen     = 1
	breakerHalfOpen = 2
)

var breakerStateNames = [...]string{breakerClosed: "closed", breakerOpen: "open", breakerHalfOpen: "half_open"}

// breaker is the relay's circuit breaker over the sink, shared by all
// partition workers.
type breaker struct {
	threshold int
	cooldown  time.Duration
	// entered, when set, is called (outside the lock) with the name of each
	// state the breaker enters.
	entered func(state string, failures int)

	mu        sync.Mutex
	failures  int
	open      bool
	openUntil time.Time
	probeAt   time.Time // when the half-open probe was let through; zero if none
	state     atomic.Int64
}

// stateCode is the state for MetricBreakerState.
func (b *breaker) stateCode() int64 { return b.state.Load() }

// enter moves to state s (b.mu held) and reports whether it changed.
func (b *breaker) enter(s int64) bool {
	return b.state.Swap(s) != s
}

func (b *breaker) tell(changed bool, s int64, failures int) {
	if changed && b.entered != nil {
		b.entered(breakerStateNames[s], failures)
	}
}

// allow reports whether a round may be published now, and whether it is the
// half-open probe. A probe that never reports back (its batch was
// abandoned) is replaced after a cooldown.
func (b *breaker) allow(now time.Time) (allowed, probe bool) {
	if b.threshold < 0 {
		return true, false
	}
	b.mu.Lock()
	if !b.open {
		b.mu.Unlock()
		return true, false
	}
	if now.Before(b.openUntil) || (!b.probeAt.IsZero() && now.Before(b.probeAt.Add(b.cooldown))) {
		b.mu.Unlock()
		return false, false
	}
	b.probeAt = now
	changed, failures := b.enter(breakerHalfOpen), b.failures
	b.mu.Unlock()
	b.tell(changed, breakerHalfOpen, failures)
	return true, true
}

// wait is how long until the breaker may let a round through (0 when
// closed or ready to probe).
func (b *breaker) wait(now time.Time) time.Duration {
	if b.threshold < 0 {
		return 0
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.open {
		return 0
	}
	until := b.openUntil
	if !b.probeAt.IsZero() {
		until = b.probeAt.Add(b.cooldown)
	}
	return max(until.Sub(now), 0)
}

// record counts a published round: success closes the breaker; a failed
// round opens it after threshold failures in a row, or at once when it was
// the probe.
func (b *breaker) record(success bool, now time.Time) {
	if b.threshold < 0 {
		return
	}
	b.mu.Lock()
	wasProbe := !b.probeAt.IsZero()
	b.probeAt = time.Time{}
	var changed bool
	var s int64
	if success {
		b.failures, b.open = 0, false
		s = breakerClosed
		changed = b.enter(s)
	} else {
		b.failures++
		if wasProbe || b.failures >= b.threshold {
			b.open, b.openUntil = true, now.Add(b.cooldown)
			s = breakerOpen
			changed = b.enter(s)
		}
	}
	failures := b.failures
	b.mu.Unlock()
	b.tell(changed, s, failures)
}
