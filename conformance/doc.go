// Package conformance is the public test suite for outbox backends: it
// proves an implementation of [outbox.Backend] right, or names exactly
// which contract it breaks.
//
// A backend's test calls [Run] with a [NewHarness] that makes a fresh,
// isolated backend (own schema, key prefix or namespace) for every case:
//
//	func TestConformance(t *testing.T) {
//		conformance.Run(t, func(t *testing.T, cfg conformance.Config) conformance.Harness[pgx.Tx] {
//			return newHarness(t, cfg) // registers its own t.Cleanup
//		})
//	}
//
// # Cases
//
// Every case is a parallel subtest named "Area/Behaviour", so a failure
// reads as the contract it pins and one case reruns with
// -run 'TestConformance/Fencing/StaleMarkSent'. The areas are:
//
//   - Append: commit-only visibility, rollback, field and payload
//     round trips (1 MiB binary, unicode), input not retained, idempotent
//     IDs (in one transaction, across transactions, while claimed, after
//     parking; an ID repeated in one call keeps its first occurrence; a
//     sent ID appends again), generated UUIDv7 IDs, invalid entries,
//     PartitionOf.
//   - Fetch: FIFO per partition (also 250+ entries of one transaction
//     fetched in small batches), batch limit, NotBefore, ordering by due
//     time, partitions isolated.
//   - Claims: exclusivity while a lease is live, return in order after
//     lease expiry or release, Release leaves entries unchanged.
//   - Outcome: MarkSent, MarkFailed (retry, attempts, long errors, park),
//     a sent entry never revived.
//   - HoldBack: a failing entry holds back its key only, until sent or
//     parked; empty keys are never held back.
//   - Lease: exclusivity, re-acquire, renewal, expiry and takeover,
//     monotonic versions, compare-and-delete release.
//   - Fencing: a stale, released, forged or expired (nobody took over)
//     lease is refused by every lease-fenced method, and changes nothing.
//   - Arguments, Lifecycle: ErrInvalidArgument (a refused renewal leaves
//     the lease valid), no-op empty inputs, ErrClosed after Close (empty
//     inputs included), cancelled contexts.
//   - Concurrency: parallel appends, competing claimers.
//   - Notifier, Canceler, Inspector: the optional interfaces, skipped
//     (saying so) when the backend does not implement them; a requeued
//     entry is ordered as if appended now.
//   - Relay: [outbox.Relay] over the backend with injected transient and
//     permanent sink failures, a relay crashing between publish and mark,
//     and several appenders and relays running together.
//
// # Time
//
// The suite runs against real servers with their own clocks, so it uses
// real, short durations: lease TTLs from 300ms, entries scheduled 400ms
// ahead. No outcome depends on how fast the machine runs the case: "not
// due" is shown with times an hour ahead and "due" with times an hour ago;
// a fetch counts as early only if it returned before the entry's time; a
// lease that must expire with claims doubles its TTL when the machine was
// too slow to use it in time; a case whose expected order needs a step to
// finish before a scheduled time reruns with twice the margin when it did
// not; every wait polls with a generous deadline. A slow machine makes
// the suite slower, never flaky. It assumes the server's clock is within
// 150ms of the test's. Most cases wait rather than compute, so run
// it with a high -parallel (16 or more): the whole suite then takes a few
// seconds.
//
// The suite is itself tested: it passes against the in-memory reference
// backend and fails, in the right subtests, against deliberately broken
// variants of it (see broken_test.go).
package conformance
