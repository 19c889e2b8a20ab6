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

// breakers are the relay's circuit breakers over the sink, one per topic,
// made on first use and shared by all partition workers: a topic the sink
// cannot publish to pauses its own entries, not the other topics'.
type breakers struct {
	threshold int
	cooldown  time.Duration
	// entered, when set, is called (outside any lock) with the topic and
	// the name of each state a topic's breaker enters.
	entered func(topic, state string, failures int)

	mu sync.Mutex
	m  map[string]*breaker
}

// of returns the breaker of topic.
func (bs *breakers) of(topic string) *breaker {
	bs.mu.Lock()
	defer bs.mu.Unlock()
	b := bs.m[topic]
	if b == nil {
		if bs.m == nil {
			bs.m = map[string]*breaker{}
		}
		b = &breaker{threshold: bs.threshold, cooldown: bs.cooldown}
		if bs.entered != nil {
			b.entered = func(state string, failures int) { bs.entered(topic, state, failures) }
		}
		bs.m[topic] = b
	}
	return b
}

// states calls f with every topic's breaker state code.
func (bs *breakers) states(f func(topic string, state int64)) {
	bs.mu.Lock()
	all := make(map[string]*breaker, len(bs.m))
	for t, b := range bs.m {
		all[t] = b
	}
	bs.mu.Unlock()
	for t, b := range all {
		f(t, b.stateCode())
	}
}

// anyClosed reports whether some topic's breaker is closed: the sink
// works for that topic, so an open breaker is its own topic's problem
// rather than an outage of the whole sink.
func (bs *breakers) anyClosed() bool {
	bs.mu.Lock()
	defer bs.mu.Unlock()
	for _, b := range bs.m {
		if b.stateCode() == breakerClosed {
			return true
		}
	}
	return false
}

// breaker is the circuit breaker of one topic.
type breaker struct {
	threshold int
	cooldown  time.Duration
	// entered, when set, is called (outside the lock) with the name of each
	// state the breaker enters.
	entered func(state string, failures int)

	mu        sync.Mutex
	failures  int    // the longest run of failed rounds of a worker since the last success
	successes uint64 // successful rounds so far
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

// streak is one worker's run of failed rounds of one topic since the
// topic last published successfully (by any worker). Only the worker's own
// goroutine touches it, under the breaker's lock.
type streak struct {
	n     int    // failed rounds in a row
	since uint64 // the breaker's successes when the run started
}

// record counts a round of the topic that a worker published: success
// closes the breaker; a failed round opens it once the worker has seen
// threshold failed rounds in a row (with no success of the topic by any
// worker in between), or at once when it was the probe. Counting per
// worker, not over all workers, makes the threshold a length of time
// rather than a number of workers: with many partitions, a burst of
// transient errors fails one round of each worker at once, which is not
// an outage.
func (b *breaker) record(success bool, now time.Time, st *streak) {
	if b.threshold < 0 {
		return
	}
	b.mu.Lock()
	wasProbe := !b.probeAt.IsZero()
	b.probeAt = time.Time{}
	var changed bool
	var s int64
	if success {
		b.successes++
		b.failures, b.open = 0, false
		st.n = 0
		s = breakerClosed
		changed = b.enter(s)
	} else {
		if st.since != b.successes {
			st.n, st.since = 0, b.successes
		}
		st.n++
		b.failures = max(b.failures, st.n)
		if wasProbe || st.n >= b.threshold {
			b.open, b.openUntil = true, now.Add(b.cooldown)
			s = breakerOpen
			changed = b.enter(s)
		}
	}
	failures := b.failures
	b.mu.Unlock()
	b.tell(changed, s, failures)
}
