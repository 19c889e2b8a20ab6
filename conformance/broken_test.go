package conformance_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/outboxrelay/outbox"
	"github.com/outboxrelay/outbox/backends/memory"
	"github.com/outboxrelay/outbox/conformance"
)

// The suite proves itself on deliberately broken backends: each variant
// below wraps the in-memory reference backend and breaks one contract from
// the outside. TestSuiteRejectsBrokenBackends runs the suite's cases that
// pin the broken contract against each variant in a subprocess (Run takes a
// *testing.T, so a failing run must happen in a test binary of its own) and
// asserts that every one of them fails.

// brokenEnv names the variant a TestBrokenChild subprocess runs.
const brokenEnv = "OUTBOX_CONFORMANCE_BROKEN"

// variant is one deliberately broken backend.
type variant struct {
	name string
	// breaks says which contract is broken, and how.
	breaks string
	// caughtBy lists subtests that must fail on it.
	caughtBy []string
}

var variants = []variant{
	{"ignores-not-before", "AppendInTx clears NotBefore, so scheduled entries are due at once", []string{"Fetch/NotBeforeHonoured", "Fetch/OrderedByNotBefore", "Fetch/ScheduledEntryDoesNotHoldBackItsKey", "Fetch/ScheduledDueNotMuchAfterNotBefore", "Looker/ScheduledEntryDueAtNotBefore"}},
	{"rollback-leaks", "AppendInTx appends in a transaction of its own and commits it, ignoring the caller's rollback", []string{"Append/RollbackLeavesNothing", "Append/VisibleOnlyAfterCommit"}},
	{"loses-concurrent-append", "AppendInTx drops the entries when another append is in progress", []string{"Concurrency/ParallelAppendsAllVisibleInOrder", "Relay/ConcurrentAppendersAndRelays"}},
	{"append-not-idempotent", "AppendInTx gives a repeated ID a new ID, so it becomes a duplicate", []string{"Append/IdempotentAcrossTxs", "Append/IdempotentInOneTx", "Append/IdempotentWhileClaimed", "Append/IdempotentAfterParked", "Append/IdempotentWhileRetrying"}},
	{"fifo-reversed", "FindPendingBatch returns each batch in reverse order", []string{"Fetch/FIFOWithinPartition", "Fetch/FIFOOneLargeTxSmallBatches", "Fetch/OrderedByRetryTime", "Claims/ComeBackInOrderAfterLeaseExpiry", "HoldBack/ManyHeldBackKeepOrder", "Relay/PerKeyOrderWithInjectedFailures"}},
	{"batch-limit-ignored", "FindPendingBatch fetches twice the limit", []string{"Fetch/BatchLimitHonoured"}},
	{"double-claim", "AcquireLease never reports ErrLeaseHeld: a second owner gets a fake lease that maps to the holder's", []string{"Lease/ExclusiveAcrossOwners", "Claims/NotHandedToAnotherOwnerWhileLeaseLive"}},
	{"stale-fetch-allowed", "FindPendingBatch with a stale lease uses the partition's newest lease instead", []string{"Fencing/StaleFindPendingBatch", "Fencing/SameOwnerReacquiredAfterExpiry"}},
	{"mark-sent-unfenced", "MarkSent with a stale lease uses the partition's newest lease instead", []string{"Fencing/StaleMarkSent", "Fencing/SameOwnerReacquiredAfterExpiry"}},
	{"mark-failed-unfenced", "MarkFailed with a stale lease uses the partition's newest lease instead", []string{"Fencing/StaleMarkFailed", "Fencing/SameOwnerReacquiredAfterExpiry"}},
	{"release-lease-unfenced", "ReleaseLease frees the partition whoever holds it", []string{"Lease/ReleaseByOtherOwnerOrVersionIsNoop", "Fencing/StaleReleaseLease", "Lease/ExpiryAllowsTakeoverWithHigherVersion"}},
	{"stale-renew-succeeds", "RenewLease of a lost lease reports success", []string{"Fencing/StaleRenewLease", "Lease/RenewAfterExpiryFails", "Fencing/ReleasedLeaseIsFenced", "Fencing/ForgedLeaseIsFenced", "Lease/ExpiryAllowsTakeoverWithHigherVersion"}},
	{"hold-back-ignored", "a failed keyed entry is tracked by the wrapper and released, so it no longer holds back its key", []string{"HoldBack/FailingEntryHoldsBackOnlyItsKey", "HoldBack/EndsWhenFailingEntrySent", "HoldBack/KeepsHoldingBackThroughRepeatedFailures", "HoldBack/ManyHeldBackKeepOrder", "Relay/PerKeyOrderWithInjectedFailures", "Relay/PerKeyOrderWithRepeatedFailures"}},
	{"release-counts-attempt", "Release records a failed attempt (MarkFailed, retry now) instead of returning entries unchanged", []string{"Claims/ReleaseReturnsEntriesUnchanged"}},
	{"close-ignored", "Close does nothing, so every method keeps working", []string{"Lifecycle/EveryMethodFailsAfterClose", "Membership/FailsAfterClose", "PartitionInspector/FailsAfterClose", "Looker/FailsAfterClose"}},
	{"ignores-context", "every call runs with context.WithoutCancel", []string{"Lifecycle/CancelledContextChangesNothing", "PartitionInspector/CancelledContextReturnsItsError", "Looker/CancelledContextReturnsItsError"}},
	{"notifies-on-append", "Notifications also fire when AppendInTx is called, before (and without) a commit", []string{"Notifier/ArrivesAfterCommit", "Notifier/NoneForRollback"}},
	{"cancel-unknown-succeeds", "Cancel of an ID that does not exist returns nil", []string{"Canceler/CancelsPendingAndScheduled", "Canceler/SentIsNotFound", "Canceler/CancelsParked"}},
	{"repeated-id-last-wins", "AppendInTx keeps the last occurrence of an ID repeated in one call", []string{"Append/RepeatedIDInOneCallFirstWins"}},
	{"sent-ids-remembered", "AppendInTx drops entries whose ID was marked sent before", []string{"Append/SentIDAppendsAgain"}},
	{"expired-lease-reacquired", "a fenced call with an expired lease nobody took over re-acquires the partition and goes ahead", []string{"Fencing/ExpiredFindPendingBatch", "Fencing/ExpiredMarkSent", "Fencing/ExpiredMarkFailed", "Fencing/ExpiredRelease", "Fencing/ReleasedLeaseIsFenced"}},
	{"closed-empty-inputs-ok", "calls with empty inputs return nil without checking Close", []string{"Lifecycle/EmptyInputsFailAfterClose"}},
	{"renew-nonpositive-drops-lease", "RenewLease with ttl <= 0 releases the lease before reporting ErrInvalidArgument", []string{"Arguments/RenewLeaseRejectsNonPositiveTTL"}},
	{"notifies-partition-zero", "Notifications sends partition 0 for every commit, whichever partitions it appended to", []string{"Notifier/CarriesThePartitionAppendedTo", "Notifier/CarriesEveryPartitionOfATransaction"}},
	{"notifies-first-partition-of-commit", "Notifications sends only the first partition of a commit that appended to several", []string{"Notifier/CarriesEveryPartitionOfATransaction"}},
	{"member-expires-from-input", "Heartbeat returns the caller's record with the Expires it was given instead of the store's expiry", []string{"Membership/HeartbeatReturnsCallerWithStoreExpiry"}},
	{"members-unsorted", "Heartbeat returns the members in reverse order of Owner", []string{"Membership/MembersSeeEachOtherSortedByOwner"}},
	{"heartbeat-merges-partitions", "Heartbeat adds the member's partitions to those of its earlier record instead of replacing the record", []string{"Membership/HeartbeatReplacesTheRecord"}},
	{"members-never-expire", "Heartbeat ignores the ttl and keeps every record for a day", []string{"Membership/RecordExpiresAfterTTL"}},
	{"leave-does-nothing", "Leave returns nil without deleting the record", []string{"Membership/LeaveRemovesAtOnceAndIsIdempotent"}},
	{"heartbeat-arguments-unchecked", "Heartbeat repairs bad arguments (an empty owner, ttl <= 0, partitions out of range, a negative MaxPartitions) instead of refusing them", []string{"Membership/HeartbeatRejectsBadArguments"}},
	{"heartbeat-retains-partitions", "Heartbeat keeps the caller's Partitions slice and returns it in later results", []string{"Membership/DoesNotShareSlicesWithCaller"}},
	{"reopen-accepts-any-count", "the harness's Reopen (the backend's constructor) accepts any partition count and reports it", []string{"PartitionCount/ReopenWithOtherCountRefused"}},
	{"reopen-zero-means-one", "Reopen with 0 partitions opens the outbox with the default of 1 instead of the stored count", []string{"PartitionCount/ReopenWithZeroReadsStoredCount"}},
	{"reopen-refuses-existing-outbox", "Reopen fails on an outbox that already exists, whatever the count", []string{"PartitionCount/ReopenWithSameCount", "PartitionCount/ReopenWithZeroReadsStoredCount"}},
	{"reopen-opens-empty-outbox", "Reopen opens a new, empty outbox with the stored count instead of the harness's", []string{"PartitionCount/EntriesFetchedThroughReopenedStore"}},
	{"partition-stats-all-in-zero", "PartitionStats attributes the counts of every partition to partition 0 (the others report none)", []string{"PartitionInspector/CountsWhereTheEntriesAre", "PartitionInspector/OldestDuePerPartition"}},
	{"partition-stats-parked-uncounted", "PartitionStats reports Parked 0 for every partition", []string{"PartitionInspector/CountsWhereTheEntriesAre", "PartitionInspector/CountsAddUpToStats"}},
	{"partition-stats-skips-idle", "PartitionStats leaves out the partitions without entries or lease (as a GROUP BY over the entries would)", []string{"PartitionInspector/OnePerPartitionInOrder"}},
	{"partition-stats-expired-lease-shown", "PartitionStats shows the last lease granted on a partition until it is released, expired or not", []string{"PartitionInspector/ReleasedOrExpiredLeaseHasNoOwner"}},
	{"partition-stats-lease-unversioned", "PartitionStats shows the lease's Owner and Expires but Version 0", []string{"PartitionInspector/HeldLeaseShowsOwnerVersionAndExpiry"}},
	{"lookup-parked-as-pending", "Lookup reports a parked entry as pending (Parked false, DueAt its CreatedAt)", []string{"Looker/ParkedEntryIsParkedWithoutDueTime"}},
	{"lookup-finds-sent", "Lookup returns an entry that was fetched and then marked sent, as pending", []string{"Looker/SentCancelledOrUnknownIsNotFound"}},
	{"lookup-shares-payload", "Lookup returns the same Payload slice and Headers map for every Lookup of an ID", []string{"Looker/ResultIsTheCallers"}},
	{"lookup-due-at-after-failure-only", "Lookup reports a zero DueAt until the entry has failed (as a nullable retry-time column would)", []string{"Looker/PendingEntryReturnedWhole", "Looker/ScheduledEntryDueAtNotBefore", "Looker/ClaimedAndHeldBackEntriesAreFound"}},
	{"lookup-truncates-error", "Lookup cuts LastError to 200 bytes (a preview, not the error as stored)", []string{"Looker/FailedEntryHasAttemptsErrorAndRetryTime"}},
	{"lookup-misses-claimed", "Lookup reports ErrNotFound for an entry claimed by a lease (looking only where unclaimed entries are)", []string{"Looker/ClaimedAndHeldBackEntriesAreFound"}},
	{"mark-failed-ignores-delay", "MarkFailed makes every failed entry due at once, ignoring Delay", []string{"Relay/RetriesWaitByStoreClockWithRelayClockAhead", "Relay/RetriesWaitByStoreClockWithRelayClockBehind", "Outcome/MarkFailedReschedulesAfterDelay", "Fetch/OrderedByRetryTime", "HoldBack/FailingEntryHoldsBackOnlyItsKey", "Looker/FailedEntryHasAttemptsErrorAndRetryTime"}},
	{"fetch-repeats-entry", "FindPendingBatch repeats the last entry of a batch that holds an attempted entry and has room (as the Redis claim did when it paged by an offset while moving held-back entries)", []string{"Fetch/EachEntryOnceAroundADueRetry", "Outcome/SentNeverFetchedAgain"}},
	{"corrupt-stalls", "FetchBatch (and FindPendingBatch) fails with the decoding error of a damaged entry at every call, so its partition stalls", []string{"Corrupt/ParkedWithReasonAndPartitionFlows", "Corrupt/RunLongerThanABatchDoesNotStall", "Corrupt/ReportedOnceByFetchBatch", "Corrupt/ReportedByFetchNext", "Corrupt/RequeueRefused"}},
	{"corrupt-parked-quietly", "FetchBatch parks a damaged entry but does not report it, so the relay neither logs nor counts the park", []string{"Corrupt/ReportedOnceByFetchBatch", "Corrupt/ReportedByFetchNext"}},
	{"corrupt-requeue-allowed", "Requeue moves a damaged entry back to pending, where it can never be published", []string{"Corrupt/RequeueRefused"}},
	{"hold-back-first-failure-only", "a keyed entry failing a second time stops holding back its key: MarkFailed deletes it and appends it again, never attempted, due after Delay (as one that sets a failing flag on the first failure only and clears it at each claim would)", []string{"HoldBack/KeepsHoldingBackThroughRepeatedFailures", "Relay/PerKeyOrderWithRepeatedFailures"}},
	{"cancel-misses-returned", "Cancel returns nil but leaves pending an entry that was claimed and came back (released by the relay, or by its lease's release or expiry), as one that looks only where never-claimed and currently claimed entries live would", []string{"Canceler/CancelAfterReleaseOrLeaseEnd"}},
	{"stats-cancel-parked-uncounted", "Stats.Parked keeps counting parked entries after they are cancelled (a counter that Cancel does not update)", []string{"Inspector/StatsRightAfterEveryChange"}},
	{"stats-cancel-pending-uncounted", "Stats.Pending and Due keep counting pending entries after they are cancelled", []string{"Inspector/StatsRightAfterEveryChange", "Canceler/CancelsPendingAndScheduled", "Canceler/CancelAfterReleaseOrLeaseEnd"}},
	{"stats-requeue-still-parked", "Stats.Parked keeps counting requeued entries", []string{"Inspector/StatsRightAfterEveryChange"}},
	{"stats-due-ignores-retry-time", "Stats.Due counts an entry retrying in the future as due (by its append time)", []string{"Inspector/StatsRightAfterEveryChange"}},
	{"mark-sent-any-partition", "MarkSent deletes the IDs it is given in whatever partition they are, checking only the lease it was given", []string{"Fencing/EntryOfAnotherPartitionUntouched"}},
	{"mark-failed-any-partition", "MarkFailed records failures of the IDs it is given in whatever partition they are, checking only the lease it was given", []string{"Fencing/EntryOfAnotherPartitionUntouched"}},
	{"release-into-lease-partition", "Release of an ID of another partition queues it in the lease's partition (as a script that adds the ID to the due set of the partition it was given would)", []string{"Fencing/EntryOfAnotherPartitionUntouched"}},
	{"requeue-takes-retrying", "Requeue also requeues pending entries that failed and wait for their retry (attempts reset, due now), counting them", []string{"Inspector/RequeueIgnoresRetryingEntry"}},
	{"fenced-calls-by-owner", "FindPendingBatch, MarkSent, MarkFailed and Release fence by owner only: a lease of the partition's current owner is taken for its current lease, whatever its version", []string{"Fencing/SameOwnerReacquiredAfterExpiry", "Fencing/ForgedLeaseIsFenced"}},
	{"renew-release-by-owner", "RenewLease and ReleaseLease compare the owner only: a lease of the partition's current owner is taken for its current lease, whatever its version", []string{"Fencing/SameOwnerReacquiredAfterExpiry", "Fencing/ForgedLeaseIsFenced", "Lease/ReleaseByOtherOwnerOrVersionIsNoop"}},
	{"not-before-late", "AppendInTx makes a scheduled entry due a second after its NotBefore", []string{"Fetch/ScheduledDueNotMuchAfterNotBefore"}},
	{"mark-failed-delay-late", "MarkFailed makes a failed entry due a second after its Delay", []string{"Outcome/RetryDueNotMuchAfterDelay"}},
	{"acquire-ttl-doubled", "AcquireLease grants the lease for twice the ttl", []string{"Lease/ExpiresNotMuchAfterTTL"}},
	{"renew-ttl-doubled", "RenewLease extends the lease by twice the ttl", []string{"Lease/ExpiresNotMuchAfterTTL"}},
	{"mark-failed-zero-delay-late", "MarkFailed makes an entry failed with Delay 0 due a second later, not at once", []string{"Outcome/RetryDueNotMuchAfterDelay"}},
	{"stats-oldest-due-is-now", "Stats reports the time of the call as OldestDue whenever an entry is due, so the lag always reads zero", []string{"Inspector/StatsRightAfterEveryChange"}},
	{"reacquire-does-not-extend", "AcquireLease by the holder returns its lease as it is, without extending it by ttl", []string{"Lease/ReacquireExtendsLikeRenew"}},
	{"release-lease-not-held-errors", "ReleaseLease of a lease that is not held (released, expired or taken over) returns ErrLeaseLost instead of nil", []string{"Lease/ReleaseOfALeaseNotHeldIsNoop", "Lease/ExpiryAllowsTakeoverWithHigherVersion"}},
	{"hold-back-whole-key", "a failing entry holds back every other entry of its key, those appended before it included", []string{"HoldBack/OnlyEarlierEntriesHoldBack"}},
	{"release-unparks", "Release of a parked ID requeues it", []string{"Claims/ReleaseLeavesUnclaimedEntriesAlone"}},
	{"fetch-shares-payload", "FindPendingBatch returns the Payload slice and Headers map of the first fetch of an ID on every later fetch of it", []string{"Fetch/BatchIsTheCallers"}},
	{"append-replaces-retrying", "AppendInTx of the ID of a pending entry that failed replaces it with the new append, unattempted, at the end of its key's order (as an upsert that only skips claimed and parked rows would)", []string{"Append/IdempotentWhileRetrying"}},
	{"member-ttl-doubled", "Heartbeat keeps the record for twice the ttl", []string{"Membership/RecordGoneNotMuchAfterTTL", "Membership/HeartbeatReturnsCallerWithStoreExpiry"}},
	{"mark-sent-unknown-errors", "MarkSent of an ID that is unknown or already sent returns ErrNotFound", []string{"Outcome/MarkSentRemovesAndIsIdempotent"}},
	{"mark-failed-unknown-errors", "MarkFailed of an ID that is unknown, sent or cancelled returns ErrNotFound", []string{"Outcome/MarkFailedNeverRevivesSent", "Canceler/CancelledClaimNeverComesBack"}},
	{"release-unknown-errors", "Release of an ID that is unknown or not claimed returns ErrNotFound", []string{"Claims/ReleaseIgnoresUnknownAndUnclaimed"}},
	{"release-unfenced", "Release with a stale lease uses the partition's newest lease instead", []string{"Fencing/StaleRelease", "Fencing/SameOwnerReacquiredAfterExpiry"}},
	{"error-cut-short", "MarkFailed keeps only the first 100 bytes of Error", []string{"Outcome/MarkFailedKeepsLongErrors"}},
	{"park-ignored", "MarkFailed with Park set retries the entry at once instead of parking it", []string{"Outcome/MarkFailedParks", "HoldBack/EndsWhenFailingEntryParked"}},
	{"park-keeps-holding-back", "a parked keyed entry keeps holding back the later entries of its key", []string{"HoldBack/EndsWhenFailingEntryParked"}},
	{"empty-key-held-back", "a failing entry with an empty key holds back the other entries with an empty key", []string{"HoldBack/EmptyKeyNeverHeldBack"}},
	{"claims-stay-with-ended-lease", "the unfinished claims of a lease that ended (expired and taken over, or released) stay claimed instead of coming back", []string{"Claims/ComeBackInOrderAfterLeaseExpiry", "Claims/ComeBackInOrderAfterLeaseRelease", "Relay/CrashBetweenPublishAndMarkIsTakenOver"}},
	{"versions-restart-after-release", "a lease granted after a release gets the version of the released lease again (a counter kept with the lease row, deleted by the release)", []string{"Lease/VersionsIncreaseAcrossReleases", "Claims/ComeBackInOrderAfterLeaseRelease"}},
	{"reacquire-new-version", "AcquireLease by the holder itself grants a new lease with a new version, fencing out the old one", []string{"Lease/SameOwnerReacquireKeepsVersion"}},
	{"renew-keeps-expiry", "RenewLease checks the lease but does not extend it", []string{"Lease/RenewExtends", "Lease/ExpiresNotMuchAfterTTL"}},
	{"acquire-arguments-unchecked", "AcquireLease repairs bad arguments (an empty owner, ttl <= 0, a partition out of range) instead of refusing them", []string{"Arguments/AcquireLeaseRejectsBadArguments"}},
	{"fetch-limit-unchecked", "FindPendingBatch with limit <= 0 returns no entries and nil instead of ErrInvalidArgument", []string{"Arguments/FindPendingBatchRejectsNonPositiveLimit"}},
	{"empty-inputs-check-lease", "MarkSent, MarkFailed and Release check the lease even when they have nothing to do", []string{"Arguments/EmptyInputsAreNoops"}},
	{"no-entries-error", "AppendInTx with no entries returns an error", []string{"Append/NoEntriesIsNoop"}},
	{"invalid-entry-partial", "AppendInTx appends the valid entries of a call one by one and stops at the first invalid one, keeping those before it", []string{"Append/InvalidEntryRejectsWholeCall"}},
	{"headers-dropped", "AppendInTx drops the headers", []string{"Append/FieldsRoundTrip"}},
	{"payload-cut-at-64k", "AppendInTx keeps only the first 64 KiB of a payload", []string{"Append/LargeBinaryPayloadAndUnicode"}},
	{"input-retained", "AppendInTx keeps the caller's payload slice and headers map and returns them on fetches", []string{"Append/InputNotRetained"}},
	{"generated-ids-not-uuidv7", "AppendInTx fills an empty ID with a sequence number instead of a UUIDv7", []string{"Append/GeneratedIDsAreUniqueUUIDv7"}},
	{"fetch-other-partitions", "FindPendingBatch also claims the due entries of the other partitions that nobody holds", []string{"Fetch/OtherPartitionsInvisible"}},
	{"notifications-never-closed", "the Notifications channel is not closed when its context is done or the backend is closed", []string{"Notifier/ClosedWhenContextDone", "Lifecycle/EveryMethodFailsAfterClose"}},
	{"cancel-parked-left", "Cancel of a parked entry returns nil but leaves it parked", []string{"Canceler/CancelsParked"}},
	{"cancelled-claim-revived", "MarkFailed of a claimed entry that was cancelled appends it again (as an upsert of the failure would)", []string{"Canceler/CancelledClaimNeverComesBack"}},
	{"parked-by-append-order", "Parked lists parked entries in the order they were parked, not by ID", []string{"Inspector/ParkedListsByIDInPages"}},
	{"requeue-keeps-attempts", "Requeue moves parked entries back to pending but keeps their Attempts", []string{"Inspector/RequeueResetsAttemptsDueNow"}},
	{"stats-claimed-not-pending", "Stats.Pending leaves out the entries claimed right now", []string{"Inspector/StatsCounts", "Inspector/StatsRightAfterEveryChange"}},
	{"requeue-keeps-order", "a requeued entry keeps its place from its first append, ahead of the entries appended after it", []string{"Inspector/RequeuedEntryOrderedAsIfAppendedNow"}},
	{"release-lease-frees-all", "ReleaseLease frees every partition, not only the lease's", []string{"Lease/PartitionsAreIndependent"}},
	{"entries-report-partition-zero", "fetched entries report Partition 0, whatever partition they are in", []string{"Append/PartitionIsPartitionOfKey"}},
	{"mark-sent-deferred", "MarkSent returns at once and deletes the entries 100ms later, with the partition's lease of that moment (as an asynchronous write would), so a new holder can be handed them again", []string{"Concurrency/CompetingClaimersNeverShareAnEntry"}},
	{"fetch-batch-over-limit", "FetchBatch fills its entries up to limit besides the parks, so entries and parks together exceed limit", []string{"Corrupt/ParkedWithReasonAndPartitionFlows"}},
	{"fetch-batch-reversed", "FetchBatch returns each batch in reverse order (FindPendingBatch is right)", []string{"BatchFetcher/SameBatchAsFindPendingBatch"}},
	{"prefetch-returns-in-flight", "FetchNext releases the entries in flight and returns them again, first", []string{"Prefetcher/LeavesInFlightOut"}},
	{"fetch-batch-unfenced", "FetchBatch with a stale lease uses the partition's newest lease instead (FindPendingBatch is fenced)", []string{"BatchFetcher/FencedLikeFindPendingBatch"}},
	{"import-appended-after", "Import appends the unparked entries it is given one by one as AppendInTx would (normal append order, after the entries already appended; attempts dropped)", []string{"Importer/DueEntryFetchedBeforeEarlierAppend", "Importer/RetryingEntryHoldsBackAppended", "Importer/InvalidEntryRejectsWholeCall"}},
	{"import-not-idempotent", "Import gives an ID the outbox already holds a new ID, so importing again duplicates it", []string{"Importer/IdempotentByIDAndCounts"}},
	{"export-skips-parked", "ExportBatch leaves out parked entries (as one that reads only the pending entries would)", []string{"Exporter/EveryStateInAppendOrder", "Importer/RoundTripEveryStateByKeyPartition", "Importer/ParkedEntryWithoutTopicStaysParked"}},
	{"hold-ignored", "Hold and HoldState keep their state in the wrapper, which fetches ignore", []string{"Holder/HeldFetchesNothingUntilUnheld", "Holder/RepeatedHoldKeepsSince"}},
	{"hold-since-reset", "Hold of a held outbox sets Since again", []string{"Holder/RepeatedHoldKeepsSince"}},
	{"import-due-not-lowered", "Import keeps the DueAt of a due entry as given, not lowered to the time the outbox was held", []string{"Importer/DueEntryLoweredToHoldSince"}},
	{"seal-ignored", "Seal and Sealed keep their state in the wrapper, which appends ignore", []string{"Sealer/SealedRefusesAppendsServesEntries", "Sealer/OpenTxCommitsBeforeSealReturnsOrFails"}},
	{"seal-checked-at-append-only", "a sealed outbox refuses AppendInTx but commits a transaction whose entries were appended before Seal", []string{"Sealer/OpenTxCommitsBeforeSealReturnsOrFails"}},
	{"export-unfenced", "ExportBatch and RemoveExported with a stale lease use the partition's newest lease instead", []string{"Exporter/FencedAndChangesNothing"}},
	{"sent-released-come-back", "MarkSent returns nil but leaves pending the entries the lease released earlier (as one that looks an entry up by a stored member a claim changed would)", []string{"Outcome/SentNeverFetchedAgain"}},
}

// broken wraps a memory backend and breaks the contract of its variant.
// The optional interfaces are promoted from the embedded backend.
type broken struct {
	*memory.Backend
	variant string

	mu        sync.Mutex
	newest    map[int]outbox.Lease          // latest lease granted per partition
	fakes     map[string]bool               // "partition/owner" of fake leases
	appending int                           // AppendInTx calls in progress
	seen      map[string]bool               // IDs appended so far
	sent      map[string]bool               // sent-ids-remembered: IDs marked sent
	keys      map[string]string             // ID -> key of fetched entries
	failing   map[string]keptFailure        // hold-back-ignored: failures kept by the wrapper
	attempts  map[string]int                // hold-back-ignored: attempts kept by the wrapper
	subs      map[chan int]struct{}         // notifies-on-append subscribers
	given     map[string][]int              // heartbeat-*: partitions given per owner
	shown     map[int]outbox.Lease          // partition-stats-expired-lease-shown: last lease granted, until released
	fetched   map[string]outbox.Entry       // lookup-finds-sent: entries fetched so far
	claimed   map[string]bool               // lookup-misses-claimed: IDs fetched and not finished
	lent      map[string]outbox.EntryInfo   // lookup-shares-payload: the first Lookup of each ID
	released  map[string]bool               // sent-released-come-back: IDs released so far
	corrupt   map[string]string             // IDs damaged through the brokenHarness's Corrupter, with the way
	overlay   map[string]outbox.Entry       // hold-back-first-failure-only: Attempts and LastError of re-appended entries
	fetchedBy map[string]outbox.Lease       // cancel-misses-returned: the lease that fetched each unfinished ID
	returned  map[string]bool               // cancel-misses-returned: IDs released by the relay
	freed     map[outbox.Lease]bool         // cancel-misses-returned: leases released (Expires cleared)
	strays    map[int][]outbox.Entry        // release-into-lease-partition: entries queued in a partition not theirs
	retrying  map[string]bool               // stats-due-ignores-retry-time: IDs failed with a retry in the future
	ghosts    outbox.Stats                  // stats-*: counts the variant keeps after they should be gone
	failingID map[string]string             // hold-back-whole-key, empty-key-held-back: failing IDs and their keys
	parkedKey map[string]string             // park-keeps-holding-back: parked IDs and their keys
	claimedBy map[string]outbox.Lease       // claims-stay-with-ended-lease, stats-claimed-not-pending: unfinished claims
	alias     map[outbox.Lease]outbox.Lease // versions-restart-after-release: reported lease -> real lease
	releases  map[int]int64                 // versions-restart-after-release: releases per partition
	inputs    map[string]outbox.Entry       // input-retained: the caller's entries
	genSeq    int                           // generated-ids-not-uuidv7: the last sequence number
	cancelled map[string]outbox.Entry       // cancelled-claim-revived: claimed entries cancelled
	requeued  map[string]bool               // requeue-keeps-order: IDs requeued
	handed    map[string]outbox.Entry       // fetch-shares-payload: the first fetch of each ID
	hold      outbox.HoldState              // hold-ignored: the hold fetches do not see
	sealed    bool                          // seal-ignored, seal-checked-at-append-only: the seal commits do not see
}

// keptFailure is a failure the hold-back-ignored variant keeps to itself,
// with the due time it computed from Delay (by the backend's clock, as a
// backend must).
type keptFailure struct {
	f   outbox.Failure
	due time.Time
}

func newBroken(variant string, b *memory.Backend) *broken {
	return &broken{
		Backend: b, variant: variant,
		newest: map[int]outbox.Lease{}, fakes: map[string]bool{}, seen: map[string]bool{}, sent: map[string]bool{},
		keys: map[string]string{}, failing: map[string]keptFailure{}, attempts: map[string]int{},
		subs: map[chan int]struct{}{}, given: map[string][]int{},
		shown: map[int]outbox.Lease{}, fetched: map[string]outbox.Entry{}, claimed: map[string]bool{}, lent: map[string]outbox.EntryInfo{},
		released: map[string]bool{}, corrupt: map[string]string{},
		overlay: map[string]outbox.Entry{}, fetchedBy: map[string]outbox.Lease{}, returned: map[string]bool{}, freed: map[outbox.Lease]bool{},
		strays: map[int][]outbox.Entry{}, retrying: map[string]bool{}, failingID: map[string]string{}, handed: map[string]outbox.Entry{},
		parkedKey: map[string]string{}, claimedBy: map[string]outbox.Lease{}, alias: map[outbox.Lease]outbox.Lease{}, releases: map[int]int64{},
		inputs: map[string]outbox.Entry{}, cancelled: map[string]outbox.Entry{}, requeued: map[string]bool{},
	}
}

// current returns the newest lease of l's partition, or l.
func (w *broken) current(l outbox.Lease) outbox.Lease {
	w.mu.Lock()
	defer w.mu.Unlock()
	if n, ok := w.newest[l.Partition]; ok {
		return n
	}
	return l
}

// byOwner is the fenced-calls-by-owner and renew-release-by-owner
// variants' fence: a lease of the partition's current owner is taken for
// its current lease.
func (w *broken) byOwner(l outbox.Lease, variant string) outbox.Lease {
	if w.variant != variant {
		return l
	}
	if n := w.current(l); n.Owner == l.Owner {
		return n
	}
	return l
}

// otherPartition reports the stored entry id when it is pending or parked
// in a partition other than partition.
func (w *broken) otherPartition(ctx context.Context, id string, partition int) (outbox.EntryInfo, bool) {
	info, err := w.Backend.Lookup(ctx, id)
	return info, err == nil && info.Partition != partition
}

// real maps a fake lease (double-claim) to the holder's lease.
func (w *broken) real(l outbox.Lease) outbox.Lease {
	if w.variant == "versions-restart-after-release" {
		w.mu.Lock()
		defer w.mu.Unlock()
		if r, ok := w.alias[outbox.Lease{Partition: l.Partition, Owner: l.Owner, Version: l.Version}]; ok {
			r.Expires = l.Expires
			return r
		}
		return l
	}
	if w.variant != "double-claim" {
		return l
	}
	w.mu.Lock()
	fake := w.fakes[fmt.Sprintf("%d/%s", l.Partition, l.Owner)]
	w.mu.Unlock()
	if fake {
		return w.current(l)
	}
	return l
}

func (w *broken) ctx(ctx context.Context) context.Context {
	if w.variant == "ignores-context" {
		return context.WithoutCancel(ctx)
	}
	return ctx
}

// revive is the expired-lease-reacquired variant: when a fenced call
// failed with ErrLeaseLost and nobody else holds the partition, it
// re-acquires the partition for the lease's owner and returns the new
// lease to retry with.
func (w *broken) revive(ctx context.Context, lease outbox.Lease, err error) (outbox.Lease, bool) {
	if w.variant != "expired-lease-reacquired" || !errors.Is(err, outbox.ErrLeaseLost) {
		return lease, false
	}
	l, aerr := w.Backend.AcquireLease(ctx, lease.Partition, lease.Owner, time.Minute)
	return l, aerr == nil
}

// emptyOK is the closed-empty-inputs-ok variant: calls with nothing to do
// return nil before the backend sees them.
func (w *broken) emptyOK(n int) bool {
	return w.variant == "closed-empty-inputs-ok" && n == 0
}

func (w *broken) AppendInTx(ctx context.Context, tx *memory.Tx, entries ...outbox.Entry) error {
	ctx = w.ctx(ctx)
	if w.emptyOK(len(entries)) {
		return nil
	}
	if err := w.sealedAppend(); err != nil && len(entries) > 0 {
		return err
	}
	entries = slices.Clone(entries)
	switch w.variant {
	case "repeated-id-last-wins":
		last := map[string]int{}
		for i, e := range entries {
			last[e.ID] = i
		}
		var keep []outbox.Entry
		for i, e := range entries {
			if e.ID == "" || last[e.ID] == i {
				keep = append(keep, e)
			}
		}
		entries = keep
	case "sent-ids-remembered":
		w.mu.Lock()
		entries = slices.DeleteFunc(entries, func(e outbox.Entry) bool { return w.sent[e.ID] })
		w.mu.Unlock()
	case "ignores-not-before":
		for i := range entries {
			entries[i].NotBefore = time.Time{}
		}
	case "not-before-late":
		for i := range entries {
			if !entries[i].NotBefore.IsZero() {
				entries[i].NotBefore = entries[i].NotBefore.Add(time.Second)
			}
		}
	case "rollback-leaks":
		own := w.Backend.Begin()
		if err := w.Backend.AppendInTx(ctx, own, entries...); err != nil {
			return err
		}
		return own.Commit()
	case "loses-concurrent-append":
		w.mu.Lock()
		busy := w.appending > 0
		w.appending++
		w.mu.Unlock()
		defer func() {
			w.mu.Lock()
			w.appending--
			w.mu.Unlock()
		}()
		if busy {
			return nil
		}
		time.Sleep(2 * time.Millisecond)
	case "no-entries-error":
		if len(entries) == 0 {
			return errors.New("broken: AppendInTx: no entries")
		}
	case "invalid-entry-partial":
		for _, e := range entries {
			if err := w.Backend.AppendInTx(ctx, tx, e); err != nil {
				return err
			}
		}
		return nil
	case "headers-dropped":
		for i := range entries {
			entries[i].Headers = nil
		}
	case "payload-cut-at-64k":
		for i := range entries {
			if len(entries[i].Payload) > 64<<10 {
				entries[i].Payload = entries[i].Payload[:64<<10]
			}
		}
	case "input-retained":
		w.mu.Lock()
		for i, e := range entries {
			if e.ID == "" {
				entries[i].ID = outbox.NewID()
			}
			if _, ok := w.inputs[entries[i].ID]; !ok {
				w.inputs[entries[i].ID] = entries[i]
			}
		}
		w.mu.Unlock()
	case "generated-ids-not-uuidv7":
		w.mu.Lock()
		for i := range entries {
			if entries[i].ID == "" {
				w.genSeq++
				entries[i].ID = fmt.Sprintf("entry-%06d", w.genSeq)
			}
		}
		w.mu.Unlock()
	case "append-replaces-retrying":
		for _, e := range entries {
			if info, err := w.Backend.Lookup(ctx, e.ID); err == nil && !info.Parked && info.Attempts > 0 {
				if err := w.Backend.MarkSent(ctx, w.current(outbox.Lease{Partition: info.Partition}), []string{e.ID}); err != nil {
					return err
				}
			}
		}
	case "append-not-idempotent":
		w.mu.Lock()
		for i := range entries {
			if entries[i].ID != "" && w.seen[entries[i].ID] {
				entries[i].ID = outbox.NewID()
			}
			w.seen[entries[i].ID] = true
		}
		w.mu.Unlock()
	case "notifies-on-append":
		w.mu.Lock()
		for ch := range w.subs {
			select {
			case ch <- outbox.AllPartitions:
			default:
			}
		}
		w.mu.Unlock()
	}
	return w.Backend.AppendInTx(ctx, tx, entries...)
}

func (w *broken) AcquireLease(ctx context.Context, partition int, owner string, ttl time.Duration) (outbox.Lease, error) {
	if w.variant == "acquire-ttl-doubled" && ttl > 0 {
		ttl *= 2
	}
	if w.variant == "acquire-arguments-unchecked" {
		if owner == "" {
			owner = "anonymous"
		}
		if ttl <= 0 {
			ttl = time.Minute
		}
		partition = min(max(partition, 0), w.Partitions()-1)
	}
	if w.variant == "reacquire-new-version" && ttl > 0 {
		w.mu.Lock()
		n, ok := w.newest[partition]
		w.mu.Unlock()
		if ok && n.Owner == owner && time.Now().Before(n.Expires) {
			_ = w.Backend.ReleaseLease(ctx, n)
		}
	}
	if w.variant == "reacquire-does-not-extend" && ttl > 0 {
		w.mu.Lock()
		n, ok := w.newest[partition]
		w.mu.Unlock()
		if ok && n.Owner == owner && time.Now().Before(n.Expires) {
			return n, nil
		}
	}
	l, err := w.Backend.AcquireLease(w.ctx(ctx), partition, owner, ttl)
	w.mu.Lock()
	defer w.mu.Unlock()
	if err == nil {
		if n, ok := w.newest[partition]; !ok || l.Version >= n.Version {
			w.newest[partition] = l
		}
		delete(w.fakes, fmt.Sprintf("%d/%s", partition, owner))
		w.shown[partition] = l
	}
	if w.variant == "versions-restart-after-release" && err == nil {
		if shown := l.Version - w.releases[partition]; shown != l.Version {
			w.alias[outbox.Lease{Partition: partition, Owner: owner, Version: shown}] = outbox.Lease{Partition: l.Partition, Owner: l.Owner, Version: l.Version}
			l.Version = shown
		}
	}
	if w.variant == "double-claim" && errors.Is(err, outbox.ErrLeaseHeld) {
		n := w.newest[partition]
		w.fakes[fmt.Sprintf("%d/%s", partition, owner)] = true
		return outbox.Lease{Partition: partition, Owner: owner, Version: n.Version, Expires: n.Expires}, nil
	}
	return l, err
}

func (w *broken) RenewLease(ctx context.Context, lease outbox.Lease, ttl time.Duration) (outbox.Lease, error) {
	if w.variant == "renew-nonpositive-drops-lease" && ttl <= 0 {
		_ = w.Backend.ReleaseLease(ctx, lease)
	}
	if w.variant == "renew-ttl-doubled" && ttl > 0 {
		ttl *= 2
	}
	if w.variant == "renew-keeps-expiry" && ttl > 0 {
		n := w.current(lease)
		if n.Owner != lease.Owner || n.Version != lease.Version || !time.Now().Before(n.Expires) {
			return outbox.Lease{}, fmt.Errorf("broken: RenewLease: %w", outbox.ErrLeaseLost)
		}
		return lease, nil
	}
	l, err := w.Backend.RenewLease(w.ctx(ctx), w.byOwner(w.real(lease), "renew-release-by-owner"), ttl)
	if err == nil {
		w.mu.Lock()
		if n := w.newest[l.Partition]; n.Version == l.Version {
			w.newest[l.Partition] = l
		}
		if n := w.shown[l.Partition]; n.Version == l.Version {
			w.shown[l.Partition] = l
		}
		w.mu.Unlock()
		l.Owner = lease.Owner
	}
	if w.variant == "stale-renew-succeeds" && errors.Is(err, outbox.ErrLeaseLost) {
		lease.Expires = time.Now().Add(ttl)
		return lease, nil
	}
	return l, err
}

func (w *broken) ReleaseLease(ctx context.Context, lease outbox.Lease) error {
	if w.variant == "release-lease-unfenced" {
		lease = w.current(lease)
	}
	lease = w.byOwner(lease, "renew-release-by-owner")
	if w.variant == "release-lease-not-held-errors" {
		w.mu.Lock()
		n := w.newest[lease.Partition]
		held := n.Owner == lease.Owner && n.Version == lease.Version && time.Now().Before(n.Expires) &&
			!w.freed[outbox.Lease{Partition: n.Partition, Owner: n.Owner, Version: n.Version}]
		w.mu.Unlock()
		if !held {
			return fmt.Errorf("broken: ReleaseLease: %s is not held: %w", lease.Owner, outbox.ErrLeaseLost)
		}
	}
	err := w.Backend.ReleaseLease(w.ctx(ctx), w.real(lease))
	if err == nil && w.variant == "release-lease-frees-all" {
		for p := range w.Partitions() {
			if p != lease.Partition {
				_ = w.Backend.ReleaseLease(ctx, w.current(outbox.Lease{Partition: p}))
			}
		}
	}
	if err == nil {
		w.mu.Lock()
		if w.variant == "versions-restart-after-release" {
			r := w.realLocked(lease)
			key := outbox.Lease{Partition: r.Partition, Owner: r.Owner, Version: r.Version}
			if n := w.newest[r.Partition]; n.Version == r.Version && n.Owner == r.Owner && time.Now().Before(n.Expires) && !w.freed[key] {
				w.releases[r.Partition]++
				w.freed[key] = true
			}
		}
		if n := w.newest[lease.Partition]; n.Owner == lease.Owner && n.Version == lease.Version {
			w.freed[outbox.Lease{Partition: n.Partition, Owner: n.Owner, Version: n.Version}] = true
		}
		if n, ok := w.shown[lease.Partition]; ok && n.Owner == lease.Owner && n.Version == lease.Version {
			delete(w.shown, lease.Partition)
		}
		w.mu.Unlock()
	}
	return err
}

// FindPendingBatch is FetchBatch without the report of parks.
func (w *broken) FindPendingBatch(ctx context.Context, lease outbox.Lease, limit int) ([]outbox.Entry, error) {
	b, err := w.fetchBatch(ctx, lease, limit)
	return b.Entries, err
}

// FetchBatch is fetchBatch, which FindPendingBatch shares, broken by the
// fetch-batch-* variants that make the two differ.
func (w *broken) FetchBatch(ctx context.Context, lease outbox.Lease, limit int) (outbox.Batch, error) {
	switch w.variant {
	case "fetch-batch-unfenced":
		lease = w.current(lease)
	}
	b, err := w.fetchBatch(ctx, lease, limit)
	if err == nil && w.variant == "fetch-batch-reversed" {
		slices.Reverse(b.Entries)
	}
	return b, err
}

// FetchNext is FetchBatch, as the memory backend's FetchNext is
// FindPendingBatch (claimed entries are never returned again), so every
// variant breaks the relay's fetches ahead as it breaks its other fetches.
// The prefetch-returns-in-flight variant breaks what FetchNext adds.
func (w *broken) FetchNext(ctx context.Context, lease outbox.Lease, limit int, inFlight []outbox.Entry) (outbox.Batch, error) {
	switch w.variant {
	case "prefetch-returns-in-flight":
		if err := w.Backend.Release(ctx, lease, inFlightIDs(inFlight)); err != nil {
			return outbox.Batch{}, err
		}
	}
	return w.FetchBatch(ctx, lease, limit)
}

func inFlightIDs(entries []outbox.Entry) []string {
	ids := make([]string, len(entries))
	for i, e := range entries {
		ids[i] = e.ID
	}
	return ids
}

// FetchBatch simulates a backend that decodes what it stores: the entries
// the brokenHarness damaged (as its Corrupter) do not decode, so they are
// parked, with a reason, and reported, as the Postgres and Redis backends
// do. The corrupt-* variants break that.
func (w *broken) fetchBatch(ctx context.Context, lease outbox.Lease, limit int) (outbox.Batch, error) {
	batch, err := w.fetchRaw(ctx, lease, limit)
	if err != nil {
		return outbox.Batch{}, err
	}
	w.mu.Lock()
	damaged := maps.Clone(w.corrupt)
	w.mu.Unlock()
	var out outbox.Batch
	var parks []outbox.Failure
	for _, e := range batch {
		how, ok := damaged[e.ID]
		if !ok {
			out.Entries = append(out.Entries, e)
			continue
		}
		reason := fmt.Sprintf("simulated decoder: entry %s: its %s does not decode", e.ID, how)
		if w.variant == "corrupt-stalls" {
			return outbox.Batch{}, errors.New(reason)
		}
		parks = append(parks, outbox.Failure{ID: e.ID, Park: true, Error: reason})
		if w.variant != "corrupt-parked-quietly" {
			out.Parked = append(out.Parked, outbox.CorruptEntry{ID: e.ID, Topic: e.Topic, Key: e.Key, Reason: reason})
		}
	}
	if len(parks) > 0 {
		if err := w.Backend.MarkFailed(w.ctx(ctx), w.real(lease), parks); err != nil {
			return outbox.Batch{}, err
		}
		if w.variant == "fetch-batch-over-limit" && len(out.Entries) < limit {
			// Top the entries up to limit, not counting the parks.
			more, err := w.fetchRaw(ctx, lease, limit-len(out.Entries))
			if err != nil {
				return outbox.Batch{}, err
			}
			for _, e := range more {
				if _, bad := damaged[e.ID]; !bad {
					out.Entries = append(out.Entries, e)
				}
			}
		}
	}
	return out, nil
}

// fetchRaw is the memory backend's FindPendingBatch, broken as the
// variant says.
func (w *broken) fetchRaw(ctx context.Context, lease outbox.Lease, limit int) ([]outbox.Entry, error) {
	ctx = w.ctx(ctx)
	lease = w.real(lease)
	switch w.variant {
	case "stale-fetch-allowed":
		lease = w.current(lease)
	case "batch-limit-ignored":
		if limit > 0 {
			limit *= 2
		}
	}
	lease = w.byOwner(lease, "fenced-calls-by-owner")
	if w.variant == "fetch-limit-unchecked" && limit <= 0 {
		return nil, nil
	}
	batch, err := w.Backend.FindPendingBatch(ctx, lease, limit)
	if err == nil && w.variant == "fetch-other-partitions" {
		for p := range w.Partitions() {
			if p == lease.Partition {
				continue
			}
			if l, aerr := w.Backend.AcquireLease(ctx, p, "broken-fetch-other-partitions", time.Minute); aerr == nil {
				more, _ := w.Backend.FindPendingBatch(ctx, l, limit)
				batch = append(batch, more...)
				_ = w.Backend.ReleaseLease(ctx, l)
			}
		}
	}
	if l, ok := w.revive(ctx, lease, err); ok {
		batch, err = w.Backend.FindPendingBatch(ctx, l, limit)
	}
	if err != nil {
		return batch, err
	}
	switch w.variant {
	case "claims-stay-with-ended-lease":
		w.mu.Lock()
		out := batch[:0]
		for _, e := range batch {
			if c, ok := w.claimedBy[e.ID]; ok && c.Version != lease.Version {
				continue // still the ended lease's claim
			}
			w.claimedBy[e.ID] = lease
			out = append(out, e)
		}
		batch = out
		w.mu.Unlock()
	case "stats-claimed-not-pending":
		w.mu.Lock()
		for _, e := range batch {
			w.claimedBy[e.ID] = lease
		}
		w.mu.Unlock()
	case "input-retained":
		w.mu.Lock()
		for i, e := range batch {
			if in, ok := w.inputs[e.ID]; ok {
				batch[i].Payload, batch[i].Headers = in.Payload, in.Headers
			}
		}
		w.mu.Unlock()
	case "park-keeps-holding-back":
		w.mu.Lock()
		var held []string
		out := batch[:0]
		for _, e := range batch {
			blocked := false
			for id, key := range w.parkedKey {
				blocked = blocked || (e.Key != "" && key == e.Key && id != e.ID)
			}
			if blocked {
				held = append(held, e.ID)
				continue
			}
			out = append(out, e)
		}
		w.mu.Unlock()
		batch = out
		if len(held) > 0 {
			if err := w.Backend.Release(ctx, lease, held); err != nil {
				return nil, err
			}
		}
	case "requeue-keeps-order":
		w.mu.Lock()
		slices.SortStableFunc(batch, func(a, b outbox.Entry) int {
			ra, rb := w.requeued[a.ID], w.requeued[b.ID]
			switch {
			case ra && !rb:
				return -1
			case rb && !ra:
				return 1
			}
			return 0
		})
		w.mu.Unlock()
	case "entries-report-partition-zero":
		for i := range batch {
			batch[i].Partition = 0
		}
	case "fetch-shares-payload":
		w.mu.Lock()
		for i, e := range batch {
			if first, ok := w.handed[e.ID]; ok {
				batch[i].Payload, batch[i].Headers = first.Payload, first.Headers
			} else {
				w.handed[e.ID] = e
			}
		}
		w.mu.Unlock()
	case "hold-back-whole-key", "empty-key-held-back":
		w.mu.Lock()
		var held []string
		out := batch[:0]
		for _, e := range batch {
			blocked := false
			for id, key := range w.failingID {
				blocked = blocked || ((e.Key != "" || w.variant == "empty-key-held-back") && key == e.Key && id != e.ID)
			}
			if blocked {
				held = append(held, e.ID)
				continue
			}
			out = append(out, e)
		}
		w.mu.Unlock()
		batch = out
		if len(held) > 0 {
			if err := w.Backend.Release(ctx, lease, held); err != nil {
				return nil, err
			}
		}
	case "release-into-lease-partition":
		w.mu.Lock()
		if st := w.strays[lease.Partition]; len(st) > 0 {
			batch = append(st, batch...)
			delete(w.strays, lease.Partition)
		}
		w.mu.Unlock()
	case "hold-back-first-failure-only", "requeue-keeps-attempts":
		w.mu.Lock()
		for i, e := range batch {
			if o, ok := w.overlay[e.ID]; ok {
				batch[i].Attempts, batch[i].LastError = o.Attempts, o.LastError
			}
		}
		w.mu.Unlock()
	case "cancel-misses-returned":
		w.mu.Lock()
		for _, e := range batch {
			w.fetchedBy[e.ID] = lease
			delete(w.returned, e.ID)
		}
		w.mu.Unlock()
	case "lookup-finds-sent", "lookup-misses-claimed":
		w.mu.Lock()
		for _, e := range batch {
			w.fetched[e.ID] = e.Clone()
			w.claimed[e.ID] = true
		}
		w.mu.Unlock()
	case "fifo-reversed":
		slices.Reverse(batch)
	case "fetch-repeats-entry":
		if n := len(batch); n > 0 && n < limit && slices.ContainsFunc(batch, func(e outbox.Entry) bool { return e.Attempts > 0 }) {
			batch = append(batch, batch[n-1].Clone())
		}
	case "hold-back-ignored":
		w.mu.Lock()
		var notDue []string
		out := batch[:0]
		for _, e := range batch {
			w.keys[e.ID] = e.Key
			if f, ok := w.failing[e.ID]; ok {
				if time.Now().Before(f.due) {
					notDue = append(notDue, e.ID)
					continue
				}
				e.Attempts, e.LastError = w.attempts[e.ID], f.f.Error
			}
			out = append(out, e)
		}
		w.mu.Unlock()
		batch = out
		if len(notDue) > 0 {
			if err := w.Backend.Release(ctx, lease, notDue); err != nil {
				return nil, err
			}
		}
	}
	return batch, nil
}

func (w *broken) MarkSent(ctx context.Context, lease outbox.Lease, ids []string) error {
	if w.variant == "mark-sent-unfenced" {
		lease = w.current(lease)
	}
	lease = w.byOwner(lease, "fenced-calls-by-owner")
	w.finished(ids...)
	if w.variant == "hold-back-whole-key" || w.variant == "empty-key-held-back" {
		w.mu.Lock()
		for _, id := range ids {
			delete(w.failingID, id)
		}
		w.mu.Unlock()
	}
	w.unclaimBy(ids...)
	if len(ids) == 0 && w.variant == "empty-inputs-check-lease" {
		if err := w.checkLease(ctx, lease); err != nil {
			return err
		}
	}
	if w.variant == "mark-sent-deferred" && len(ids) > 0 {
		if err := w.checkLease(ctx, lease); err != nil {
			return err
		}
		later := slices.Clone(ids)
		time.AfterFunc(100*time.Millisecond, func() {
			_ = w.Backend.MarkSent(context.Background(), w.current(lease), later)
		})
		return nil
	}
	if w.variant == "mark-sent-unknown-errors" {
		for _, id := range ids {
			if _, err := w.Backend.Lookup(ctx, id); err != nil {
				return fmt.Errorf("broken: MarkSent: %w", err)
			}
		}
	}
	if w.variant == "mark-sent-any-partition" {
		for _, id := range ids {
			if info, ok := w.otherPartition(ctx, id, lease.Partition); ok {
				if err := w.Backend.MarkSent(ctx, w.current(outbox.Lease{Partition: info.Partition}), []string{id}); err != nil {
					return err
				}
			}
		}
	}
	if w.variant == "hold-back-ignored" {
		w.mu.Lock()
		for _, id := range ids {
			delete(w.failing, id)
		}
		w.mu.Unlock()
	}
	w.unclaim(ids...)
	if w.variant == "sent-released-come-back" {
		w.mu.Lock()
		ids = slices.DeleteFunc(slices.Clone(ids), func(id string) bool { return w.released[id] })
		w.mu.Unlock()
	}
	if w.emptyOK(len(ids)) {
		return nil
	}
	err := w.Backend.MarkSent(w.ctx(ctx), w.real(lease), ids)
	if l, ok := w.revive(ctx, lease, err); ok {
		err = w.Backend.MarkSent(ctx, l, ids)
	}
	if err == nil && w.variant == "sent-ids-remembered" {
		w.mu.Lock()
		for _, id := range ids {
			w.sent[id] = true
		}
		w.mu.Unlock()
	}
	return err
}

func (w *broken) MarkFailed(ctx context.Context, lease outbox.Lease, failures []outbox.Failure) error {
	ctx = w.ctx(ctx)
	lease = w.real(lease)
	for _, f := range failures {
		w.unclaim(f.ID)
	}
	lease = w.byOwner(lease, "fenced-calls-by-owner")
	for _, f := range failures {
		w.finished(f.ID)
		w.unclaimBy(f.ID)
	}
	if len(failures) == 0 && w.variant == "empty-inputs-check-lease" {
		if err := w.checkLease(ctx, lease); err != nil {
			return err
		}
	}
	switch w.variant {
	case "mark-failed-unfenced":
		lease = w.current(lease)
	case "mark-failed-any-partition":
		for _, f := range failures {
			if info, ok := w.otherPartition(ctx, f.ID, lease.Partition); ok {
				if err := w.Backend.MarkFailed(ctx, w.current(outbox.Lease{Partition: info.Partition}), []outbox.Failure{f}); err != nil {
					return err
				}
			}
		}
	case "hold-back-whole-key", "empty-key-held-back":
		w.mu.Lock()
		for _, f := range failures {
			if f.Park {
				delete(w.failingID, f.ID)
			} else if info, err := w.Backend.Lookup(ctx, f.ID); err == nil && (info.Key != "" || w.variant == "empty-key-held-back") {
				w.failingID[f.ID] = info.Key
			}
		}
		w.mu.Unlock()
	case "park-keeps-holding-back":
		w.mu.Lock()
		for _, f := range failures {
			if info, err := w.Backend.Lookup(ctx, f.ID); err == nil && f.Park && info.Key != "" {
				w.parkedKey[f.ID] = info.Key
			}
		}
		w.mu.Unlock()
	case "park-ignored":
		failures = slices.Clone(failures)
		for i := range failures {
			failures[i].Park, failures[i].Delay = false, 0
		}
	case "error-cut-short":
		failures = slices.Clone(failures)
		for i := range failures {
			failures[i].Error = outbox.TruncateUTF8(failures[i].Error, 100)
		}
	case "mark-failed-unknown-errors":
		for _, f := range failures {
			if info, err := w.Backend.Lookup(ctx, f.ID); err != nil || info.Parked {
				return fmt.Errorf("broken: MarkFailed: no pending entry %q: %w", f.ID, outbox.ErrNotFound)
			}
		}
	case "cancelled-claim-revived":
		for _, f := range failures {
			w.mu.Lock()
			e, ok := w.cancelled[f.ID]
			delete(w.cancelled, f.ID)
			w.mu.Unlock()
			if ok {
				tx := w.Backend.Begin()
				if err := w.Backend.AppendInTx(ctx, tx, e); err == nil {
					_ = tx.Commit()
				}
			}
		}
	case "mark-failed-zero-delay-late":
		failures = slices.Clone(failures)
		for i := range failures {
			if failures[i].Delay == 0 {
				failures[i].Delay = time.Second
			}
		}
	case "mark-failed-delay-late":
		failures = slices.Clone(failures)
		for i := range failures {
			if failures[i].Delay > 0 {
				failures[i].Delay += time.Second
			}
		}
	case "stats-due-ignores-retry-time":
		w.mu.Lock()
		for _, f := range failures {
			if !f.Park && f.Delay > 0 {
				w.retrying[f.ID] = true
			}
		}
		w.mu.Unlock()
	case "hold-back-first-failure-only":
		var pass []outbox.Failure
		for _, f := range failures {
			if !f.Park && w.failAgain(ctx, lease, f) {
				continue
			}
			pass = append(pass, f)
		}
		failures = pass
	case "mark-failed-ignores-delay":
		failures = slices.Clone(failures)
		for i := range failures {
			failures[i].Delay = 0
		}
	case "hold-back-ignored":
		var pass []outbox.Failure
		var release []string
		w.mu.Lock()
		for _, f := range failures {
			if key := w.keys[f.ID]; key != "" && !f.Park {
				w.failing[f.ID] = keptFailure{f: f, due: time.Now().Add(f.Delay)}
				w.attempts[f.ID]++
				release = append(release, f.ID)
				continue
			}
			pass = append(pass, f)
		}
		w.mu.Unlock()
		if len(release) > 0 {
			if err := w.Backend.Release(ctx, lease, release); err != nil {
				return err
			}
		}
		failures = pass
	}
	if w.emptyOK(len(failures)) {
		return nil
	}
	err := w.Backend.MarkFailed(ctx, lease, failures)
	if l, ok := w.revive(ctx, lease, err); ok {
		err = w.Backend.MarkFailed(ctx, l, failures)
	}
	return err
}

// realLocked is real for the versions-restart-after-release variant with
// w.mu held.
func (w *broken) realLocked(l outbox.Lease) outbox.Lease {
	if r, ok := w.alias[outbox.Lease{Partition: l.Partition, Owner: l.Owner, Version: l.Version}]; ok {
		return r
	}
	return l
}

// unclaimBy forgets the claims of the given IDs (claims-stay-with-ended-lease,
// stats-claimed-not-pending).
func (w *broken) unclaimBy(ids ...string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, id := range ids {
		delete(w.claimedBy, id)
	}
}

// checkLease is the empty-inputs-check-lease variant's fence: lease must be
// the partition's newest, live lease.
func (w *broken) checkLease(_ context.Context, lease outbox.Lease) error {
	n := w.current(lease)
	if n.Owner != lease.Owner || n.Version != lease.Version || !time.Now().Before(n.Expires) {
		return fmt.Errorf("broken: lease %s v%d is not held: %w", lease.Owner, lease.Version, outbox.ErrLeaseLost)
	}
	return nil
}

// finished is the cancel-misses-returned variant's record that the relay
// finished the entries with the given IDs.
func (w *broken) finished(ids ...string) {
	if w.variant != "cancel-misses-returned" {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, id := range ids {
		delete(w.fetchedBy, id)
		delete(w.returned, id)
	}
}

// cameBack reports whether the entry id was claimed and came back without
// being finished: released by the relay, or its lease released or expired
// or taken over (the cancel-misses-returned variant then cannot find it).
func (w *broken) cameBack(id string) bool {
	w.mu.Lock()
	l, fetched := w.fetchedBy[id]
	returned := w.returned[id]
	freed := w.freed[outbox.Lease{Partition: l.Partition, Owner: l.Owner, Version: l.Version}]
	w.mu.Unlock()
	if !fetched {
		return false
	}
	return returned || freed || !time.Now().Before(l.Expires) || w.current(l).Version != l.Version
}

// failAgain is the hold-back-first-failure-only variant's MarkFailed of a
// keyed entry that failed before: it deletes the entry and appends it
// again, never attempted (so it holds nothing back), due Delay from now,
// keeping its Attempts and LastError to itself. It reports whether it
// took the failure.
func (w *broken) failAgain(ctx context.Context, lease outbox.Lease, f outbox.Failure) bool {
	info, err := w.Backend.Lookup(ctx, f.ID)
	if err != nil || info.Parked || info.Key == "" || info.Partition != lease.Partition {
		return false
	}
	w.mu.Lock()
	attempts := info.Attempts
	if o, ok := w.overlay[f.ID]; ok {
		attempts = o.Attempts
	}
	w.mu.Unlock()
	if attempts == 0 {
		return false
	}
	if err := w.Backend.MarkSent(ctx, lease, []string{f.ID}); err != nil {
		return false
	}
	again := outbox.Entry{ID: info.ID, Topic: info.Topic, Key: info.Key, Payload: info.Payload, Headers: info.Headers, NotBefore: time.Now().Add(f.Delay)}
	tx := w.Backend.Begin()
	if err := w.Backend.AppendInTx(ctx, tx, again); err != nil {
		_ = tx.Rollback()
		return false
	}
	if err := tx.Commit(); err != nil {
		return false
	}
	w.mu.Lock()
	w.overlay[f.ID] = outbox.Entry{Attempts: attempts + 1, LastError: f.Error}
	w.mu.Unlock()
	return true
}

// unclaim is the lookup-misses-claimed variant's record that the relay
// finished the entries with the given IDs.
func (w *broken) unclaim(ids ...string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, id := range ids {
		delete(w.claimed, id)
	}
}

func (w *broken) Release(ctx context.Context, lease outbox.Lease, ids []string) error {
	ctx = w.ctx(ctx)
	lease = w.real(lease)
	lease = w.byOwner(lease, "fenced-calls-by-owner")
	w.unclaim(ids...)
	w.unclaimBy(ids...)
	if len(ids) == 0 && w.variant == "empty-inputs-check-lease" {
		if err := w.checkLease(ctx, lease); err != nil {
			return err
		}
	}
	switch w.variant {
	case "release-unfenced":
		lease = w.current(lease)
	case "release-unknown-errors":
		for _, id := range ids {
			if _, err := w.Backend.Lookup(ctx, id); err != nil {
				return fmt.Errorf("broken: Release: %w", err)
			}
		}
	case "cancel-misses-returned":
		w.mu.Lock()
		for _, id := range ids {
			if _, ok := w.fetchedBy[id]; ok {
				w.returned[id] = true
			}
		}
		w.mu.Unlock()
	case "release-unparks":
		for _, id := range ids {
			if info, err := w.Backend.Lookup(ctx, id); err == nil && info.Parked {
				if _, err := w.Backend.Requeue(ctx, id); err != nil {
					return err
				}
			}
		}
	case "release-into-lease-partition":
		for _, id := range ids {
			if info, ok := w.otherPartition(ctx, id, lease.Partition); ok && !info.Parked {
				w.mu.Lock()
				w.strays[lease.Partition] = append(w.strays[lease.Partition], info.Entry)
				w.mu.Unlock()
			}
		}
	}
	if w.variant == "sent-released-come-back" {
		w.mu.Lock()
		for _, id := range ids {
			w.released[id] = true
		}
		w.mu.Unlock()
	}
	if w.variant == "release-counts-attempt" && len(ids) > 0 {
		fs := make([]outbox.Failure, len(ids))
		for i, id := range ids {
			fs[i] = outbox.Failure{ID: id, Error: "released", Delay: 0}
		}
		return w.Backend.MarkFailed(ctx, lease, fs)
	}
	if w.emptyOK(len(ids)) {
		return nil
	}
	err := w.Backend.Release(ctx, lease, ids)
	if l, ok := w.revive(ctx, lease, err); ok {
		err = w.Backend.Release(ctx, l, ids)
	}
	return err
}

func (w *broken) Close() error {
	if w.variant == "close-ignored" {
		return nil
	}
	return w.Backend.Close()
}

func (w *broken) Notifications(ctx context.Context) (<-chan int, error) {
	real, err := w.Backend.Notifications(w.ctx(ctx))
	if err != nil {
		return real, err
	}
	switch w.variant {
	case "notifications-never-closed":
		out := make(chan int, 256)
		go func() {
			for p := range real {
				select {
				case out <- p:
				default:
				}
			}
		}()
		return out, nil
	case "notifies-on-append":
		return w.notifyOnAppend(real), nil
	case "notifies-partition-zero":
		out := make(chan int, 256)
		go func() {
			defer close(out)
			for range real {
				select {
				case out <- 0:
				default:
				}
			}
		}()
		return out, nil
	case "notifies-first-partition-of-commit":
		out := make(chan int, 256)
		go func() {
			defer close(out)
			for p := range real {
				select {
				case out <- p:
				default:
				}
				// The memory backend sends a commit's partitions at once:
				// drop what follows within 50ms.
				quiet := time.NewTimer(50 * time.Millisecond)
				for dropping := true; dropping; {
					select {
					case _, ok := <-real:
						if !ok {
							quiet.Stop()
							return
						}
					case <-quiet.C:
						dropping = false
					}
				}
			}
		}()
		return out, nil
	}
	return real, nil
}

// notifyOnAppend merges real with the values the notifies-on-append
// variant sends from AppendInTx.
func (w *broken) notifyOnAppend(real <-chan int) <-chan int {
	out := make(chan int, 256)
	extra := make(chan int, 1)
	w.mu.Lock()
	w.subs[extra] = struct{}{}
	w.mu.Unlock()
	go func() {
		defer close(out)
		defer func() {
			w.mu.Lock()
			delete(w.subs, extra)
			w.mu.Unlock()
		}()
		for {
			var p int
			select {
			case v, ok := <-real:
				if !ok {
					return
				}
				p = v
			case p = <-extra:
			}
			select {
			case out <- p:
			default:
			}
		}
	}()
	return out
}

func (w *broken) Heartbeat(ctx context.Context, m outbox.Member, ttl time.Duration) ([]outbox.Member, error) {
	in := m
	switch w.variant {
	case "members-never-expire":
		ttl = 24 * time.Hour
	case "member-ttl-doubled":
		if ttl > 0 {
			ttl *= 2
		}
	case "heartbeat-arguments-unchecked":
		if m.Owner == "" {
			m.Owner = "anonymous"
		}
		if ttl <= 0 {
			ttl = time.Minute
		}
		m.MaxPartitions = max(m.MaxPartitions, 0)
		m.Partitions = slices.DeleteFunc(slices.Clone(m.Partitions), func(p int) bool { return p < 0 || p >= w.Partitions() })
	case "heartbeat-merges-partitions":
		w.mu.Lock()
		merged := slices.Sorted(slices.Values(append(slices.Clone(w.given[m.Owner]), m.Partitions...)))
		merged = slices.Compact(merged)
		w.given[m.Owner] = merged
		w.mu.Unlock()
		m.Partitions = merged
	}
	got, err := w.Backend.Heartbeat(w.ctx(ctx), m, ttl)
	if err != nil {
		return got, err
	}
	switch w.variant {
	case "member-expires-from-input":
		for i := range got {
			if got[i].Owner == in.Owner {
				got[i].Expires = in.Expires
			}
		}
	case "members-unsorted":
		slices.Reverse(got)
	case "heartbeat-retains-partitions":
		w.mu.Lock()
		w.given[in.Owner] = in.Partitions
		for i := range got {
			if p, ok := w.given[got[i].Owner]; ok {
				got[i].Partitions = p
			}
		}
		w.mu.Unlock()
	}
	return got, nil
}

func (w *broken) Leave(ctx context.Context, owner string) error {
	if w.variant == "leave-does-nothing" {
		return nil
	}
	return w.Backend.Leave(w.ctx(ctx), owner)
}

func (w *broken) Cancel(ctx context.Context, id string) error {
	if w.variant == "cancel-misses-returned" && w.cameBack(id) {
		return nil
	}
	before, lerr := w.Backend.Lookup(ctx, id)
	if w.variant == "cancel-parked-left" && lerr == nil && before.Parked {
		return nil
	}
	err := w.Backend.Cancel(w.ctx(ctx), id)
	if err == nil && lerr == nil && w.variant == "cancelled-claim-revived" {
		w.mu.Lock()
		w.cancelled[id] = outbox.Entry{ID: before.ID, Topic: before.Topic, Key: before.Key, Payload: before.Payload, Headers: before.Headers}
		w.mu.Unlock()
	}
	if err == nil && lerr == nil {
		w.mu.Lock()
		switch {
		case w.variant == "stats-cancel-parked-uncounted" && before.Parked:
			w.ghosts.Parked++
		case w.variant == "stats-cancel-pending-uncounted" && !before.Parked:
			w.ghosts.Pending++
			if !before.DueAt.After(time.Now()) {
				w.ghosts.Due++
			}
		}
		w.mu.Unlock()
	}
	if w.variant == "cancel-unknown-succeeds" && errors.Is(err, outbox.ErrNotFound) {
		return nil
	}
	return err
}

func (w *broken) Stats(ctx context.Context) (outbox.Stats, error) {
	st, err := w.Backend.Stats(w.ctx(ctx))
	if err != nil {
		return st, err
	}
	w.mu.Lock()
	g := w.ghosts
	var retrying []string
	for id := range w.retrying {
		retrying = append(retrying, id)
	}
	w.mu.Unlock()
	st.Pending += g.Pending
	st.Due += g.Due
	st.Parked += g.Parked
	if g.Due > 0 && st.OldestDue.IsZero() {
		st.OldestDue = time.Now()
	}
	if w.variant == "stats-claimed-not-pending" {
		w.mu.Lock()
		for _, l := range w.claimedBy {
			if n := w.newest[l.Partition]; n.Version == l.Version && time.Now().Before(n.Expires) && !w.freed[outbox.Lease{Partition: n.Partition, Owner: n.Owner, Version: n.Version}] {
				st.Pending--
			}
		}
		w.mu.Unlock()
	}
	if w.variant == "stats-oldest-due-is-now" && st.Due > 0 {
		st.OldestDue = time.Now()
	}
	for _, id := range retrying {
		if info, err := w.Backend.Lookup(ctx, id); err == nil && !info.Parked && info.DueAt.After(time.Now()) {
			st.Due++
			if st.OldestDue.IsZero() {
				st.OldestDue = info.CreatedAt
			}
		}
	}
	return st, nil
}

func (w *broken) Parked(ctx context.Context, after string, limit int) ([]outbox.Entry, error) {
	got, err := w.Backend.Parked(w.ctx(ctx), after, limit)
	if err == nil && w.variant == "parked-by-append-order" {
		slices.Reverse(got)
	}
	return got, err
}

// Requeue refuses the damaged entries (see FetchBatch), unless the
// variant is corrupt-requeue-allowed.
func (w *broken) Requeue(ctx context.Context, ids ...string) (int, error) {
	if w.emptyOK(len(ids)) {
		return 0, nil
	}
	var refused []outbox.Refusal
	if w.variant != "corrupt-requeue-allowed" {
		w.mu.Lock()
		keep := ids[:0:0]
		for _, id := range ids {
			if how, ok := w.corrupt[id]; ok {
				refused = append(refused, outbox.Refusal{ID: id, Reason: "simulated decoder: its " + how + " does not decode"})
				continue
			}
			keep = append(keep, id)
		}
		w.mu.Unlock()
		ids = keep
	}
	if w.variant == "requeue-keeps-attempts" {
		for _, id := range ids {
			if info, err := w.Backend.Lookup(ctx, id); err == nil && info.Parked {
				w.mu.Lock()
				w.overlay[id] = outbox.Entry{Attempts: info.Attempts, LastError: info.LastError}
				w.mu.Unlock()
			}
		}
	}
	if w.variant == "requeue-takes-retrying" {
		for _, id := range ids {
			if info, err := w.Backend.Lookup(ctx, id); err == nil && !info.Parked && info.Attempts > 0 {
				_ = w.Backend.MarkFailed(ctx, w.current(outbox.Lease{Partition: info.Partition}), []outbox.Failure{{ID: id, Error: info.LastError, Park: true}})
			}
		}
	}
	n, err := w.Backend.Requeue(w.ctx(ctx), ids...)
	if err == nil && len(refused) > 0 {
		err = &outbox.RequeueRefusedError{Refused: refused}
	}
	if w.variant == "requeue-keeps-order" && err == nil {
		w.mu.Lock()
		for _, id := range ids {
			w.requeued[id] = true
		}
		w.mu.Unlock()
	}
	if w.variant == "stats-requeue-still-parked" {
		w.mu.Lock()
		w.ghosts.Parked += int64(n)
		w.mu.Unlock()
	}
	return n, err
}

// Corrupt marks the stored entry id as damaged in the named way (the
// brokenHarness's Corrupter).
func (w *broken) Corrupt(id, how string) {
	w.mu.Lock()
	w.corrupt[id] = how
	w.mu.Unlock()
}

func (w *broken) PartitionStats(ctx context.Context) ([]outbox.PartitionStats, error) {
	got, err := w.Backend.PartitionStats(w.ctx(ctx))
	if err != nil {
		return got, err
	}
	switch w.variant {
	case "partition-stats-all-in-zero":
		for i := 1; i < len(got); i++ {
			got[0].Pending += got[i].Pending
			got[0].Due += got[i].Due
			got[0].Parked += got[i].Parked
			if o := got[i].OldestDue; !o.IsZero() && (got[0].OldestDue.IsZero() || o.Before(got[0].OldestDue)) {
				got[0].OldestDue = o
			}
			got[i].Stats = outbox.Stats{}
		}
	case "partition-stats-parked-uncounted":
		for i := range got {
			got[i].Parked = 0
		}
	case "partition-stats-skips-idle":
		got = slices.DeleteFunc(got, func(ps outbox.PartitionStats) bool {
			return ps.Stats == (outbox.Stats{}) && ps.Lease.Owner == ""
		})
	case "partition-stats-expired-lease-shown":
		w.mu.Lock()
		for i := range got {
			if l, ok := w.shown[i]; ok && got[i].Lease.Owner == "" {
				got[i].Lease = l
			}
		}
		w.mu.Unlock()
	case "partition-stats-lease-unversioned":
		for i := range got {
			got[i].Lease.Version = 0
		}
	}
	return got, nil
}

func (w *broken) Lookup(ctx context.Context, id string) (outbox.EntryInfo, error) {
	info, err := w.Backend.Lookup(w.ctx(ctx), id)
	w.mu.Lock()
	defer w.mu.Unlock()
	switch w.variant {
	case "lookup-finds-sent":
		if e, ok := w.fetched[id]; ok && errors.Is(err, outbox.ErrNotFound) {
			return outbox.EntryInfo{Entry: e.Clone(), DueAt: e.CreatedAt}, nil
		}
	case "lookup-misses-claimed":
		if err == nil && w.claimed[id] {
			return outbox.EntryInfo{}, fmt.Errorf("broken: no entry has ID %q: %w", id, outbox.ErrNotFound)
		}
	}
	if err != nil {
		return info, err
	}
	switch w.variant {
	case "lookup-parked-as-pending":
		if info.Parked {
			info.Parked, info.DueAt = false, info.CreatedAt
		}
	case "lookup-shares-payload":
		if first, ok := w.lent[id]; ok {
			info.Payload, info.Headers = first.Payload, first.Headers
		} else {
			w.lent[id] = info
		}
	case "lookup-due-at-after-failure-only":
		if info.Attempts == 0 {
			info.DueAt = time.Time{}
		}
	case "lookup-truncates-error":
		info.LastError = outbox.TruncateUTF8(info.LastError, 200)
	}
	return info, nil
}

// ExportBatch is the memory backend's, broken by the export-* variants.
func (w *broken) ExportBatch(ctx context.Context, lease outbox.Lease, limit int) ([]outbox.EntryInfo, error) {
	if w.variant == "export-unfenced" {
		lease = w.current(lease)
	}
	out, err := w.Backend.ExportBatch(ctx, lease, limit)
	if w.variant == "export-skips-parked" {
		out = slices.DeleteFunc(out, func(info outbox.EntryInfo) bool { return info.Parked })
	}
	return out, err
}

// RemoveExported is the memory backend's, unfenced by export-unfenced.
func (w *broken) RemoveExported(ctx context.Context, lease outbox.Lease, ids []string) error {
	if w.variant == "export-unfenced" {
		lease = w.current(lease)
	}
	return w.Backend.RemoveExported(ctx, lease, ids)
}

// Import is the memory backend's, broken by the import-* variants.
func (w *broken) Import(ctx context.Context, entries []outbox.EntryInfo) (int, error) {
	entries = slices.Clone(entries)
	switch w.variant {
	case "import-not-idempotent":
		for i := range entries {
			if _, err := w.Backend.Lookup(ctx, entries[i].ID); err == nil {
				entries[i].ID = outbox.NewID()
			}
		}
	case "import-due-not-lowered":
		// Import into an outbox that is not held (whose bound is now,
		// which lowers nothing already due), then hold it again.
		hs, err := w.Backend.HoldState(ctx)
		if err != nil || !hs.Held {
			break
		}
		if err := w.Backend.Unhold(ctx); err != nil {
			return 0, err
		}
		n, err := w.Backend.Import(ctx, entries)
		if herr := w.Backend.Hold(ctx, hs.Reason); herr != nil {
			return n, herr
		}
		return n, err
	case "import-appended-after":
		var keep []outbox.EntryInfo
		n := 0
		for _, info := range entries {
			if info.Parked {
				keep = append(keep, info)
				continue
			}
			if _, err := w.Backend.Lookup(ctx, info.ID); err == nil {
				continue
			}
			e := info.Entry
			if info.DueAt.After(time.Now()) {
				e.NotBefore = info.DueAt
			}
			if err := w.Backend.Append(ctx, e); err != nil {
				return n, err
			}
			n++
		}
		m, err := w.Backend.Import(ctx, keep)
		return n + m, err
	}
	return w.Backend.Import(ctx, entries)
}

// Hold, Unhold and HoldState are the memory backend's, or the wrapper's
// own state for hold-ignored; hold-since-reset sets Since again.
func (w *broken) Hold(ctx context.Context, reason string) error {
	switch w.variant {
	case "hold-ignored":
		if err := ctx.Err(); err != nil {
			return err
		}
		w.mu.Lock()
		defer w.mu.Unlock()
		if !w.hold.Held {
			w.hold = outbox.HoldState{Held: true, Since: time.Now()}
		}
		w.hold.Reason = reason
		return nil
	case "hold-since-reset":
		if err := w.Backend.Unhold(ctx); err != nil {
			return err
		}
	}
	return w.Backend.Hold(ctx, reason)
}

func (w *broken) Unhold(ctx context.Context) error {
	if w.variant == "hold-ignored" {
		w.mu.Lock()
		defer w.mu.Unlock()
		w.hold = outbox.HoldState{}
		return ctx.Err()
	}
	return w.Backend.Unhold(ctx)
}

func (w *broken) HoldState(ctx context.Context) (outbox.HoldState, error) {
	if w.variant == "hold-ignored" {
		w.mu.Lock()
		defer w.mu.Unlock()
		return w.hold, ctx.Err()
	}
	return w.Backend.HoldState(ctx)
}

// Seal, Unseal and Sealed are the memory backend's, or the wrapper's own
// state for seal-ignored. seal-checked-at-append-only seals the backend
// only while AppendInTx runs (see sealedAppend).
func (w *broken) Seal(ctx context.Context) error {
	switch w.variant {
	case "seal-ignored", "seal-checked-at-append-only":
		w.mu.Lock()
		defer w.mu.Unlock()
		w.sealed = true
		return ctx.Err()
	}
	return w.Backend.Seal(ctx)
}

func (w *broken) Unseal(ctx context.Context) error {
	switch w.variant {
	case "seal-ignored", "seal-checked-at-append-only":
		w.mu.Lock()
		defer w.mu.Unlock()
		w.sealed = false
		return ctx.Err()
	}
	return w.Backend.Unseal(ctx)
}

func (w *broken) Sealed(ctx context.Context) (bool, error) {
	switch w.variant {
	case "seal-ignored", "seal-checked-at-append-only":
		w.mu.Lock()
		defer w.mu.Unlock()
		return w.sealed, ctx.Err()
	}
	return w.Backend.Sealed(ctx)
}

// sealedAppend is seal-checked-at-append-only's AppendInTx: refused while
// the wrapper is sealed, and never checked at commit.
func (w *broken) sealedAppend() error {
	if w.variant != "seal-checked-at-append-only" {
		return nil
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.sealed {
		return fmt.Errorf("broken: AppendInTx: %w", outbox.ErrSealed)
	}
	return nil
}

// TestBrokenChild runs the suite against the variant named by
// OUTBOX_CONFORMANCE_BROKEN. It is the subprocess of
// TestSuiteRejectsBrokenBackends and expected to fail; TestSimulatedReopen
// runs it with the variant "none", which breaks nothing.
func TestBrokenChild(t *testing.T) {
	name := os.Getenv(brokenEnv)
	if name == "" {
		t.Skip("runs only as a subprocess of TestSuiteRejectsBrokenBackends or TestSimulatedReopen, with " + brokenEnv + " set")
	}
	conformance.Run(t, func(t *testing.T, cfg conformance.Config) conformance.Harness[*memory.Tx] {
		b := memory.New(memory.Options{Partitions: cfg.Partitions})
		t.Cleanup(func() { _ = b.Close() })
		w := newBroken(name, b)
		return brokenHarness{
			reopenHarness: reopenHarness{memoryHarness: memoryHarness{b: w, begin: b.Begin}, mem: b},
			variant:       name,
			w:             w,
		}
	})
}

// brokenHarness is the reopenHarness of a broken variant: the reopen-*
// variants break its Reopen (the constructor a backend that stores its
// partition count would have).
type brokenHarness struct {
	reopenHarness
	variant string
	w       *broken
}

// Corruptions and Corrupt make brokenHarness a conformance.Corrupter over
// the simulated decoder of broken.FetchBatch: the memory backend stores
// typed values, so nothing in it can be damaged by hand, and TestMemory
// runs without a Corrupter (the suite skips the Corrupt cases there). The
// Corrupt cases run on it (TestSimulatedCorruption, and the corrupt-*
// variants) prove the cases, not the memory backend.
func (h brokenHarness) Corruptions() []string { return []string{"payload encoding", "headers field"} }

func (h brokenHarness) Corrupt(ctx context.Context, id, how string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	h.w.Corrupt(id, how)
	return nil
}

func (h brokenHarness) Reopen(ctx context.Context, partitions int) (outbox.Store, error) {
	stored := h.mem.Partitions()
	switch h.variant {
	case "reopen-accepts-any-count":
		if partitions == 0 {
			partitions = stored
		}
		return &reopenedStore{Store: h.mem, partitions: partitions}, nil
	case "reopen-zero-means-one":
		if partitions == 0 {
			partitions = 1
		}
	case "reopen-refuses-existing-outbox":
		return nil, errors.New("memory (simulated reopen): the outbox already exists")
	case "reopen-opens-empty-outbox":
		if partitions != 0 && partitions != stored {
			break
		}
		fresh := memory.New(memory.Options{Partitions: stored})
		return &reopenedStore{Store: fresh, partitions: stored, closeStore: true}, nil
	}
	return h.reopenHarness.Reopen(ctx, partitions)
}

func TestSuiteRejectsBrokenBackends(t *testing.T) {
	if os.Getenv(brokenEnv) != "" {
		t.Skip("inside a TestBrokenChild subprocess")
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatalf("os.Executable: %v", err)
	}
	// Each child runs only the subtests that must catch its variant, so
	// the whole check costs a few cases per variant instead of the whole
	// suite per variant (which kept both cores of a CI machine busy while
	// other packages ran their timing-sensitive tests). The children
	// mostly wait (leases, retries, watchdogs), so run them all at once.
	type result struct {
		out    []byte
		err    error
		failed []string
	}
	results := make([]result, len(variants))
	var wg sync.WaitGroup
	for i, v := range variants {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, exe, "-test.run="+runPattern(v.caughtBy), "-test.v", "-test.count=1", "-test.parallel=16", "-test.timeout=150s")
			cmd.Env = append(os.Environ(), brokenEnv+"="+v.name)
			var out bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &out
			err := cmd.Run()
			results[i] = result{out: out.Bytes(), err: err, failed: failingSubtests(out.Bytes())}
		})
	}
	wg.Wait()
	for i, v := range variants {
		r := results[i]
		t.Run(v.name, func(t *testing.T) {
			var exit *exec.ExitError
			if !errors.As(r.err, &exit) {
				t.Fatalf("the suite PASSED against variant %q (%s), or could not run (%v); it must fail.\n%s", v.name, v.breaks, r.err, tail(string(r.out), 40))
			}
			if len(r.failed) == 0 {
				t.Fatalf("the suite exited with %v against %q but no subtest failed (a crash or timeout?):\n%s", r.err, v.name, tail(string(r.out), 40))
			}
			for _, want := range v.caughtBy {
				if !slices.Contains(r.failed, want) {
					t.Errorf("variant %q (%s) was not caught by %s; failing subtests: %v", v.name, v.breaks, want, r.failed)
				}
			}
		})
	}
	var b strings.Builder
	b.WriteString("broken variant → the subtests of conformance.Run that pin its contract, as they failed on it\n")
	for i, v := range variants {
		fmt.Fprintf(&b, "  %-24s (%s)\n      → %s\n", v.name, v.breaks, strings.Join(results[i].failed, ", "))
	}
	t.Log(b.String())
}

// runPattern is the -test.run pattern of TestBrokenChild that selects the
// "Area/Case" subtests names (and, as -run matches level by level, other
// cases of those areas with one of those case names).
func runPattern(names []string) string {
	var areas, cases []string
	for _, n := range names {
		area, c, _ := strings.Cut(n, "/")
		if !slices.Contains(areas, area) {
			areas = append(areas, area)
		}
		if !slices.Contains(cases, c) {
			cases = append(cases, c)
		}
	}
	return "^TestBrokenChild$/^(" + strings.Join(areas, "|") + ")$/^(" + strings.Join(cases, "|") + ")$"
}

// failingSubtests returns the "Area/Case" names of the failing leaf
// subtests in go test -v output.
func failingSubtests(out []byte) []string {
	var names []string
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		rest, ok := strings.CutPrefix(line, "--- FAIL: TestBrokenChild/")
		if !ok {
			continue
		}
		name, _, _ := strings.Cut(rest, " ")
		if strings.Contains(name, "/") && !slices.Contains(names, name) {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	return names
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
