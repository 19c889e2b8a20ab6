package natssink

import "time"

// Failing reports whether publishing fails, as kafkasink.Sink.Failing
// does: since is when the first Publish call failed whole (every message
// of it failed) after the last call with a message acknowledged, on the
// sink's clock ([Options.Now]), and last is the first error of the latest
// call that failed whole; both are zero when publishing does not fail.
// Calls ended by their own context, and calls of no entry, change
// nothing. The outbox relay command's /readyz reads it.
func (s *Sink) Failing() (since time.Time, last error) { return s.health.Failing() }
