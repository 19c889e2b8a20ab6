// Package sinkhealth remembers whether a sink's publishing fails, for the
// sinks' Failing methods (which the outbox relay command's /readyz reads).
// The sinks share it so that "failing" means the same for every broker.
package sinkhealth

import (
	"context"
	"errors"
	"sync"
	"time"
)

// Health is whether publishing fails. The zero value is not failing. It is
// safe for concurrent use.
type Health struct {
	mu    sync.Mutex
	since time.Time // of the first call failed whole since the last call with a message acknowledged; zero: not failing
	last  error     // the first error of the latest call failed whole
}

// Record notes the outcome of one Publish call at now: acknowledged when
// a message of it was (errs holds a nil), failed when every message failed
// with an error other than ctx's own end (a relay stopping, or losing a
// lease, is not a failure of publishing); calls of no message, or ended by
// ctx, leave it as it was.
func (h *Health) Record(ctx context.Context, now time.Time, errs []error) {
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

// Failing reports since when every Publish call has failed whole (on the
// clock Record was given) and the first error of the latest such call;
// both are zero when not failing.
func (h *Health) Failing() (since time.Time, last error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.since, h.last
}
