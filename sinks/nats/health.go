package natssink

import (
	"context"
	"errors"
	"sync"
	"time"
)

// publishHealth remembers whether publishing fails, for [Sink.Failing].
type publishHealth struct {
	mu    sync.Mutex
	since time.Time // first call failed whole since the last acknowledgement; zero: not failing
	last  error     // first error of the latest call failed whole
}

// note records the outcome of one Publish call at now. A call with an
// acknowledged message clears the state; a call all of whose messages
// failed, other than by its own context ending, sets it; other calls
// leave it alone.
func (h *publishHealth) note(ctx context.Context, now time.Time, errs []error) {
	var first error
	for _, err := range errs {
		switch {
		case err == nil:
			h.mu.Lock()
			h.since, h.last = time.Time{}, nil
			h.mu.Unlock()
			return
		case first == nil && (ctx.Err() == nil || !errors.Is(err, ctx.Err())):
			first = err
		}
	}
	if first == nil {
		return
	}
	h.mu.Lock()
	if h.since.IsZero() {
		h.since = now
	}
	h.last = first
	h.mu.Unlock()
}

// Failing reports whether publishing fails, as kafkasink.Sink.Failing
// does: since is when the first Publish call failed whole (every message
// of it failed) after the last call with a message acknowledged, on the
// sink's clock ([Options.Now]), and last is the first error of the latest
// call that failed whole; both are zero when publishing does not fail.
// Calls ended by their own context, and calls of no entry, change
// nothing. The outbox relay command's /readyz reads it.
func (s *Sink) Failing() (since time.Time, last error) {
	s.health.mu.Lock()
	defer s.health.mu.Unlock()
	return s.health.since, s.health.last
}
