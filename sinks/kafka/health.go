package kafkasink

import "time"

// Failing reports whether publishing fails: since is when the first
// Publish call failed whole (every record of it failed) after the last
// call that had a record acknowledged, on the sink's clock
// ([Options.Now]), and last is the first error of the latest call that
// failed whole. Both are zero when no call has failed whole since the
// last acknowledged record (or ever). Calls that end because their
// context did, and calls of no entry, change nothing. A program that
// serves a readiness check reads it to report a sink that has failed
// every publish for a while (the outbox relay command's /readyz does).
func (s *Sink) Failing() (since time.Time, last error) { return s.health.Failing() }
