package outbox

import (
	"sync"
	"time"
)

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
