package amqpsink

import "time"

// Failing reports whether publishing fails: since is when the first
// Publish call failed whole (every message of it failed) after the last
// call that had a message confirmed, on the sink's clock ([Options.Now]),
// and last is the first error of the latest call that failed whole. Both
// are zero when no call failed whole since the last confirmed message.
// Calls ended by their own context, and calls of no entry, change nothing.
// The outbox relay command's /readyz reads it, as it does the Kafka
// sink's.
func (s *Sink) Failing() (since time.Time, last error) { return s.health.Failing() }
