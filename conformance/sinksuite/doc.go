// Package sinksuite is the public conformance suite for outbox sinks: it
// proves an implementation of [outbox.Sink] (and of the optional
// [outbox.KeyOrderer] and [outbox.LandingBounder]) right against a real
// broker, or names exactly which contract it breaks.
//
// A sink's test calls [Run] with a [NewHarness] that makes a fresh,
// isolated destination on the broker and a sink publishing to it, for
// every case:
//
//	func TestSinkSuite(t *testing.T) {
//		sinksuite.Run(t, func(t *testing.T, cfg sinksuite.Config) sinksuite.Harness {
//			return newHarness(t, cfg) // registers its own t.Cleanup
//		})
//	}
//
// docs/sink-authors.md says what the SPI asks of a sink and what each
// area of the suite checks.
package sinksuite
