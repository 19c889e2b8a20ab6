package amqpsink

import (
	"context"
	"errors"
	"sync"
	"time"
)

// publishHealth remembers whether publishing fails, for [Sink.Failing].
type publishHealth struct {
	mu    sync.Mutex
	since time.Time // first call failed whole since the last confirmed message; zero: not failing
	last  error     // the first error of the latest call failed whole
}

// record notes one Publish call's outcome: a confirmed message clears the
// state; a call whose every message failed (other than by ctx's own end)
// sets it.
func (h *publishHealth) record(ctx context.Context, now time.Time, errs []error) {
	var first error
	for _, err := range errs {
		if err == nil {
			h.mu.Lock()
			h.since, h.last = time.Time{}, nil
			h.mu.Unlock()
			return
		}
		if first == nil && (ctx.Err() == nil || !errors.Is(err, ctx.Err())) {
			first = err
		}
	}
	if first == nil {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.since.IsZero() {
		h.since = now
	}
	h.last = first
}

// Failing reports whether publishing fails: since is when the first
// Publish call failed whole (every message of it failed) after the last
// call that had a message confirmed, on the sink's clock ([Options.Now]),
// and last is the first error of the latest call that failed whole. Both
// are zero when no call failed whole since the last confirmed message.
// Calls ended by their own context, and calls of no entry, change nothing.
// The outbox relay command's /readyz reads it, as it does the Kafka
// sink's.
func (s *Sink) Failing() (since time.Time, last error) {
	s.health.mu.Lock()
	defer s.health.mu.Unlock()
	return s.health.since, s.health.last
}
