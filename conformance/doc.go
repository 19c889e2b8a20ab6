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
//     parking, while retrying; an ID repeated in one call keeps its first
//     occurrence; a sent ID appends again), generated UUIDv7 IDs, invalid
//     entries, PartitionOf.
//   - Fetch: FIFO per partition (also 250+ entries of one transaction
//     fetched in small batches), batch limit, NotBefore, ordering by due
//     time (a negative retry Delay puts it in the past), partitions
//     isolated, each entry once in a batch (also when a failing entry's
//     retry is due behind an entry it holds back), a scheduled entry due
//     not much after its NotBefore, the batch the caller's.
//   - Claims: exclusivity while a lease is live, return in order after
//     lease expiry or release, Release leaves entries unchanged (and
//     parked, retrying or never fetched entries alone).
//   - Outcome: MarkSent, MarkFailed (due again Delay after the call by the
//     store's clock, not before and not much after, attempts, long errors,
//     park), a sent entry never
//     revived, and never fetched again by the same or a later lease while
//     entries fail, retry at once, hold back their key and are released
//     (each key still sent in append order).
//   - HoldBack: a failing entry holds back the later entries of its key
//     only (not earlier ones), until sent or parked, through any number of
//     retries; empty keys are never held back.
//   - Lease: exclusivity, re-acquire (extending like a renewal), renewal,
//     expiry and takeover (a lease ends ttl after it was granted or
//     renewed, not much later), monotonic versions, compare-and-delete
//     release (a no-op for a lease not held).
//   - Fencing: a stale, released, forged or expired (nobody took over)
//     lease is refused by every lease-fenced method, and changes nothing;
//     so is the old lease of an owner that acquired the partition again
//     after its lease expired; a fenced call given an entry of another
//     partition leaves it untouched.
//   - Arguments, Lifecycle: ErrInvalidArgument (a refused renewal leaves
//     the lease valid), no-op empty inputs, ErrClosed after Close (empty
//     inputs included), cancelled contexts.
//   - Concurrency: parallel appends, competing claimers.
//   - Notifier, Canceler, Inspector, Membership: the optional interfaces,
//     skipped (saying so) when the backend does not implement them. A
//     notification names the partition a commit appended to (each
//     partition of a transaction that appended to several), or
//     [outbox.AllPartitions]; a cancelled entry never comes back, also
//     after its claim was released or its lease ended; Stats is right
//     after every operation that changes a count; a requeued entry is
//     ordered as if appended now, and Requeue ignores a retrying entry; a heartbeat returns the live members sorted by owner with
//     expiries by the store's clock, replaces the owner's record, and
//     keeps none of the caller's slices; records expire after their ttl
//     and Leave removes them at once; bad arguments and a closed backend
//     are refused.
//   - PartitionInspector, Looker: the operator interfaces, skipped (saying
//     so) when the backend does not implement them. PartitionStats reports
//     one element per partition, in order, idle partitions included; each
//     partition's Pending, Due and Parked count the entries where they are
//     (scheduled, retrying and claimed entries are pending; a claimed
//     entry may or may not count as due), with the partition's own
//     OldestDue, and they add up to [outbox.Inspector.Stats] when the
//     backend implements both; a held lease shows its Owner, Version and
//     expiry by the store's clock, a released or expired one an empty
//     Owner. Lookup returns a pending, scheduled, retrying, claimed,
//     held-back or parked entry whole, with its partition, CreatedAt,
//     Attempts, LastError (as a fetch returns it; truncated, if at all, at
//     no less than 1024 bytes), Parked and DueAt (append time, NotBefore,
//     the store's now plus the failure's Delay, or zero when parked); a
//     sent, cancelled or never appended ID is [outbox.ErrNotFound]; the
//     entry returned is the caller's. Both refuse a closed backend and
//     return a cancelled context's error.
//   - History, Deferred: the attempt history and the breaker's deferral,
//     read through [outbox.Looker] (skipped, saying so, without it). Each
//     MarkFailed that is not Deferred adds an attempt with its error, the
//     lease's owner and the store's time, oldest first, the last
//     [outbox.MaxAttemptHistory] kept, parks included, kept by Requeue. A
//     Deferred failure leaves Attempts, LastError and History as they
//     were, makes the entry due Delay after the store's now and Deferred,
//     and holds back the later entries of its key (only its key, even
//     when it was never attempted) until it is sent or parked; a real
//     failure after it counts; Park with Deferred is refused with
//     [outbox.ErrInvalidArgument] and nothing of the call is written.
//   - Lister, Collation: [outbox.Lister] (skipped, saying so, when the
//     backend does not implement it). Entries selects exactly the entries
//     of each state (due: claimed, held back and failed with Delay 0
//     included; scheduled: never attempted, deferred or not; retrying;
//     parked), each filter field (Topic and Key exact; Error a literal
//     substring with ASCII letters folded and other bytes, % and _
//     included, as they are; Since inclusive, Until exclusive), pages by
//     ID after a given ID, stored or not, and refuses an unknown state, a
//     limit that is not positive and a closed backend. BlockedKeys lists
//     the keys whose earliest pending entry was attempted, deferred or is
//     of a paused topic (not a key whose head is free, not an unkeyed
//     entry) with the head as Lookup reports it and the count waiting
//     behind it, the longest blocked first, Since being the head's oldest
//     attempt or its CreatedAt, pages by (Since, head ID) and filters on
//     the head; PartitionStats' BlockedKeys and OldestDueID agree with it
//     and with the due entries. Parked, Entries and BlockedKeys' ties page
//     in the byte order of IDs with IDs a case-insensitive or locale
//     collation orders otherwise.
//   - Pauser: a paused topic's entries are never fetched (by
//     FindPendingBatch, FetchBatch or FetchNext) nor attempted, and hold
//     back the later entries of their keys in every topic, other keys
//     flow; after the resume everything comes, each key in append
//     order; a paused partition fetches nothing but still refuses a
//     lease that is not live; pausing again keeps Since, resuming what is
//     not paused is a no-op, Paused orders topics by bytes and partitions
//     ascending; an empty topic, a partition out of range and a closed
//     backend are refused.
//   - MemberLister: the live members, by Owner, as Heartbeat stored them
//     (Host and Version cut at 255 bytes, Started to the millisecond),
//     with Renewed and Expires by the store's clock; an expired or
//     departed member is not listed; a closed backend is refused.
//   - PartitionCount: the partition count stored with the outbox. A
//     backend's constructor opened again (the harness implements
//     [Reopener]; skipped, saying so, when it does not) accepts the same
//     count, reads the stored one when configured with 0, refuses another
//     with an [outbox.PartitionMismatchError] naming both counts, and sees
//     the entries appended through the first store in their partitions.
//   - BatchFetcher: FetchBatch returns, step by step while a partition
//     with hold-back, scheduled and unkeyed entries drains, the batch
//     FindPendingBatch returns for the same state, and is fenced and
//     checks its limit as FindPendingBatch does (skipped, saying so, when
//     the backend does not implement [outbox.BatchFetcher]).
//   - Prefetcher: FetchNext with a batch in flight returns the entries
//     behind it, never one in flight, and leaves those unchanged; an
//     attempted entry in flight holds back its key; it is fenced and checks
//     its limit as FetchBatch does (skipped, saying so, when the backend
//     does not implement [outbox.Prefetcher]).
//   - Corrupt: a stored entry damaged by hand (the harness implements
//     [Corrupter] and names the ways; skipped, saying so, when it does
//     not), once for each way: it is parked with a reason and one attempt,
//     never handed to the relay, and the rest of its partition, its own key
//     included, is delivered in order (also behind a run of damaged
//     entries longer than a batch); an [outbox.BatchFetcher] reports each
//     such park once, with the reason that became its LastError, and so
//     does an [outbox.Prefetcher]'s FetchNext; an
//     [outbox.Inspector] refuses to requeue it with an
//     [outbox.RequeueRefusedError] while requeueing the healthy entries of
//     the same call.
//   - Exporter, Importer, Holder, Sealer: moving a live outbox (see
//     move.go), each skipped, saying so, when the backend does not
//     implement the interface. An export returns every unsent entry of the
//     partition (due, scheduled, retrying, parked, claimed under an expired
//     lease) in append order with its state, claims nothing and is fenced;
//     RemoveExported removes entries in every state, fenced and
//     idempotent. Import keeps every state as it was, in the partition the
//     key maps to here (entries built by hand as another partition count
//     exported them), is idempotent by ID and counts what it added, puts
//     imported entries before every appended entry of their key (also
//     those appended before the import), lets an imported attempted entry
//     hold back the appended ones, lowers a due entry's due time to the
//     hold's Since (reading due times through [outbox.Looker]), keeps a
//     scheduled one's, refuses an invalid entry whole, and keeps a parked
//     entry without a topic parked. A held outbox fetches nothing while
//     entries are due, and a repeated Hold keeps Since; a sealed outbox
//     refuses appends with [outbox.ErrSealed] and serves its entries, and
//     a transaction open at Seal commits before Seal returns or fails.
//   - Relay: [outbox.Relay] over the backend with injected transient
//     (also repeated: two to four failures of one entry) and permanent
//     sink failures, a relay crashing between publish and mark,
//     several appenders and relays running together, and a relay whose
//     clock is 10 minutes off, whose retries must still wait their Delay
//     by the store's clock (not parking the entry early).
//   - ArchiveJanitor (the harness gets Config.Archive; skipped, saying
//     so, when the backend does not implement [outbox.ArchiveJanitor]):
//     MarkSent archives (OldestArchived reports when, within the suite's
//     clock skew); PurgeArchiveBatch removes only entries sent before its
//     horizon, at most its limit per call, oldest first, reports more
//     while old entries remain and (0, false) on an empty archive, and
//     leaves pending entries alone; MaintainArchive may be called again.
//   - ParkedPurger (skipped when not implemented): PurgeParked removes
//     parked entries only (never pending or claimed ones), those parked
//     before its horizon, at most its limit, oldest park first, reports
//     more while some remain; a requeued entry is not removed, and parked
//     again its park time starts over.
//   - HealthChecker (skipped when not implemented): Health answers, every
//     table named, no figure below -1, every warning with a Code and a
//     Message.
//   - Retention: two relays, one serving each partition, with
//     RelayOptions.ParkedRetention over a ParkedPurger: every entry the
//     sink refuses is parked and then removed exactly once, by the relay
//     that serves partition 0 only.
//
// # Time
//
// The suite runs against real servers with their own clocks, so it uses
// real, short durations: lease TTLs from 300ms, entries scheduled (or
// retried) 400ms ahead. No outcome depends on how fast the machine runs the case: "not
// due" is shown with times an hour ahead and "due" with times an hour ago;
// a fetch counts as early only if it returned before the entry's time,
// and late only if it started clockSkew after the entry was due by the
// suite's clock (after NotBefore, or Delay after MarkFailed returned; a
// lease or membership record likewise by ttl after the call returned); a
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
// variants of it (see broken_test.go, and broken_<area>_test.go for the
// variants of each area). docs/backend-authors.md lists every
// promise of the SPI with the subtests that pin it and the variants that
// prove them. The memory backend cannot be
// reopened, so the PartitionCount cases are proven on a harness that
// simulates a reopening constructor over it (see memory_test.go).
package conformance
