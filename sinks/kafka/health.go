package kafkasink

import (
	"context"
	"errors"
	"sync"
	"time"
)

// publishHealth remembers whether publishing fails, for [Sink.Failing].
type publishHealth struct {
	mu    sync.Mutex
	since time.Time // of the first failed call since the last call with a record acknowledged; zero: not failing
	last  error     // the first error of the latest failed call
}

// record notes the outcome of one Publish call at now: acknowledged when a
// record of it was, failed when every record failed with an error other
// than ctx's own end (a relay stopping, or losing a lease, is not a
// failure of publishing); calls of no entry, or ended by ctx, leave it as
// it was.
func (h *publishHealth) record(ctx context.Context, now time.Time, errs []error) {
	var first error
	for _, err := range errs {
		if err == nil {
			h.mu.Lock()
			h.since, h.last = time.Time{}, nil
			h.mu.Unlock()
			return
		}
		if first == nil && !(ctx.Err() != nil && errors.Is(err, ctx.Err())) {
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
// Publish call failed whole (every record of it failed) after the last
// call that had a record acknowledged, on the sink's clock
// ([Options.Now]), and last is the first error of the latest call that
// failed whole. Both are zero when no call has failed whole since the
// last acknowledged record (or ever). Calls that end because their
// context did, and calls of no entry, change nothing. A program that
// serves a readiness check reads it to report a sink that has failed
// every publish for a while (the outbox relay command's /readyz does).
func (s *Sink) Failing() (since time.Time, last error) {
	s.health.mu.Lock()
	defer s.health.mu.Unlock()
	return s.health.since, s.health.last
}
