package outbox

import (
	"context"
	"time"
)

// Backend is the storage SPI of the outbox, generic over the caller's
// transaction type (pgx.Tx for Postgres, redis.Pipeliner for Redis).
//
// The append half ([Backend.AppendInTx]) runs inside the caller's
// transaction; the relay half ([Store]) needs no transaction type, so a
// [Relay] can be built from any Backend[Tx] without knowing Tx.
//
// A Backend does storage, not policy: each method is one storage round
// trip where it can be, never sleeps and never retries. Batching, retries,
// backoff, lease renewal, ordering and metrics belong to the [Relay].
//
// Implementations must be safe for concurrent use by multiple goroutines
// and must pass [github.com/outboxrelay/outbox/conformance.Run].
type Backend[Tx any] interface {
	Store

	// AppendInTx adds entries to the outbox as part of tx. The entries
	// become visible to FindPendingBatch if and only if tx commits; a
	// rollback leaves nothing behind.
	//
	// Entries are prepared with [PrepareEntries]: an empty ID gets a
	// time-ordered UUIDv7, the partition is derived from the key, and
	// invalid entries are rejected with an error wrapping [ErrInvalidEntry]
	// before anything is written. Appending an ID that already exists and
	// is not yet sent (pending, claimed or parked) is a no-op for that
	// entry, not an error and not a duplicate; when one call or one
	// transaction repeats an ID, the first occurrence wins. Sent entries
	// are removed (or archived, outside the outbox's reach), so appending
	// the ID of a sent entry appends it again: idempotency covers retries
	// of an append, not replays after delivery. Within one partition,
	// entries are ordered by append order: the entries of one call in
	// slice order, calls in the order the backend applies them (commit
	// order, or insert order for backends that number rows at insert).
	//
	// AppendInTx with no entries does nothing and returns nil. It does not
	// retain or modify the entries slice or the payload and header values
	// after it returns. It must not commit or roll back tx. With a
	// cancelled ctx it either returns the context's error and queues
	// nothing, or (for backends that only queue commands into tx) returns
	// nil and leaves the outcome to tx. After Close it returns [ErrClosed].
	AppendInTx(ctx context.Context, tx Tx, entries ...Entry) error
}

// Store is the relay-facing half of a [Backend]: leases on partitions,
// fetching due entries and recording outcomes. Every method that reads or
// writes entries takes the [Lease] of the entry's partition and is fenced by
// it: when the lease is no longer held by lease.Owner at lease.Version, the
// method changes nothing and returns an error wrapping [ErrLeaseLost].
//
// A lease that has expired is no longer held, whether or not another owner
// has taken it over: fenced calls with it return [ErrLeaseLost].
//
// All methods are safe for concurrent use. After Close every method returns
// an error wrapping [ErrClosed], even for empty inputs. Context errors are returned as they are
// (checkable with errors.Is against context.Canceled and
// context.DeadlineExceeded); a cancelled context never leaves a write
// half-applied.
type Store interface {
	// Partitions reports the number of partitions entries are spread over.
	// It is fixed for the life of the outbox and stored with it: a backend
	// records the count when the outbox is created, and its constructor
	// refuses a configured count that differs from the stored one, so
	// every appender and relay of one outbox uses the same count. Partitions are numbered
	// 0..Partitions()-1 and an entry's partition is [PartitionOf] its key.
	Partitions() int

	// AcquireLease makes owner the single holder of partition for ttl.
	//
	// If the partition is free, or its lease has expired, the lease is
	// granted with a Version greater than any version granted before for
	// that partition. If owner already holds it, the lease is extended by
	// ttl (as RenewLease would) and keeps its Version. If another owner
	// holds an unexpired lease, AcquireLease returns an error wrapping
	// [ErrLeaseHeld]. owner must be non-empty and ttl positive, else the
	// error wraps [ErrInvalidArgument].
	AcquireLease(ctx context.Context, partition int, owner string, ttl time.Duration) (Lease, error)

	// RenewLease extends a held lease by ttl from now (compare-and-renew):
	// it succeeds only while lease.Owner still holds lease.Partition at
	// lease.Version and the lease has not expired. Otherwise it changes
	// nothing and returns an error wrapping [ErrLeaseLost]. The returned
	// Lease carries the new expiry. A non-positive ttl is rejected with
	// [ErrInvalidArgument] and leaves the lease as it was.
	RenewLease(ctx context.Context, lease Lease, ttl time.Duration) (Lease, error)

	// ReleaseLease gives up a lease (compare-and-delete): it frees the
	// partition only when lease.Owner still holds it at lease.Version.
	// Releasing a lease that expired, was taken over or was already
	// released is a no-op and returns nil; it never frees a lease another
	// owner holds.
	ReleaseLease(ctx context.Context, lease Lease) error

	// FindPendingBatch claims up to limit due entries of lease.Partition:
	// entries whose next attempt time has come, that are not parked, and
	// that are not held back by their key (see below). limit must be
	// positive.
	//
	// Order: entries are returned by next attempt time, ties broken by
	// append order. A batch is a prefix of that order over the eligible
	// entries, so when two eligible entries of one key are both due, the
	// batch never holds the later one without the earlier one. An entry
	// that was never attempted becomes due at its NotBefore (or its append
	// time), so a scheduled entry takes its place in its key's order at
	// the time it is scheduled for.
	//
	// Per-key hold-back: an entry with a non-empty Key is not eligible
	// while an entry of the same partition and key, appended earlier, has
	// been attempted (Attempts > 0) and is neither sent nor parked: a
	// failing entry holds back the later entries of its key, and only of
	// its key, until it is sent or parked. Entries with an empty Key are
	// unordered and never held back.
	//
	// Claims: claimed entries belong to lease. No other lease is handed
	// them while this lease is live; when the lease ends (it expires and is
	// taken over, or it is released) its unfinished claims come back by
	// themselves, in their original order, to the next holder. A backend
	// may or may not return an unfinished entry again to the same lease, so
	// the relay finishes (MarkSent, MarkFailed or Release) every entry of a
	// batch before it fetches the next one, unless the store is a
	// [Prefetcher] (then it names the batch in flight).
	//
	// The returned slice and its entries are owned by the caller.
	FindPendingBatch(ctx context.Context, lease Lease, limit int) ([]Entry, error)

	// MarkSent records that the entries with the given IDs were published:
	// it removes them (or archives them, as the backend is configured). It
	// is idempotent: IDs that are unknown or already sent are ignored. IDs
	// must belong to lease.Partition. An empty ids does nothing and returns
	// nil (without checking the lease). ids is not retained.
	MarkSent(ctx context.Context, lease Lease, ids []string) error

	// MarkFailed records failed delivery attempts. For each failure it
	// increments the entry's Attempts, stores Error as LastError and
	// either re-schedules the entry Delay after now by the store's clock
	// (never by the caller's) or, when Park is set, parks
	// it (terminal: kept for inspection and requeue, never fetched again
	// until requeued). A failed, not parked entry keeps holding back the
	// later entries of its key. IDs that are unknown or already sent are
	// ignored: MarkFailed never brings a sent entry back. An empty
	// failures does nothing and returns nil. failures is not retained.
	MarkFailed(ctx context.Context, lease Lease, failures []Failure) error

	// Release returns claimed entries that the relay did not attempt (held
	// back behind a failure of their key, or left over when a batch was
	// aborted) to pending, unchanged: same attempts, last error, due time
	// and order. IDs that are unknown or not claimed are ignored; an empty
	// ids does nothing.
	Release(ctx context.Context, lease Lease, ids []string) error

	// Close releases the backend's own resources (never the caller's
	// client or pool). It is idempotent.
	Close() error
}

// BatchFetcher is an optional interface of a [Store] that parks, inside
// FindPendingBatch, the entries whose stored data it cannot decode (a
// column or field changed by hand, a format it does not know), so that one
// such entry never stalls its partition. FetchBatch reports those parks;
// the relay calls it instead of FindPendingBatch when a store implements
// it, logs each reported park at WARN (the store's parks are rare and
// unexpected; the relay's own are summarized) and counts it in its stats
// and metrics like a park of its own.
type BatchFetcher interface {
	// FetchBatch does exactly what FindPendingBatch does, and reports in
	// Batch.Parked each entry this call parked because its stored data
	// could not be decoded. A parked entry is parked as MarkFailed parks
	// (Attempts grows by one, LastError is the reason, it stops holding
	// back its key), it is not in Batch.Entries, and a later call does not
	// report it again. The entries and the parks of one call are at most
	// limit together.
	FetchBatch(ctx context.Context, lease Lease, limit int) (Batch, error)
}

// Prefetcher is an optional interface of a [Store] that can claim a
// partition's next batch while the batch before it is still in flight, so
// that the store's work on the next batch overlaps the relay's publishing
// of this one. The relay calls FetchNext, when a store implements it,
// right after a fetch that returned a full batch; it publishes the
// entries FetchNext returned only after it recorded every entry of the
// batch in flight as sent or parked, and otherwise gives them back
// unattempted: with Release while it holds the lease, else (lease lost,
// stopping) through the lease's end.
type Prefetcher interface {
	// FetchNext claims up to limit entries of lease.Partition as
	// FetchBatch would (and reports its parks the same way) if the entries
	// of inFlight, the unfinished claims of lease's last fetch, were no
	// longer pending: it never returns an entry of inFlight, and entries
	// behind them in the partition's order take their place. The entries
	// of inFlight stay claimed by lease, unchanged.
	//
	// Per-key hold-back: an entry of inFlight with Attempts > 0 holds back
	// the later entries of its key, as a pending attempted entry does. A
	// backend may also hold back the later entries of the key of an
	// inFlight entry that was never attempted (the next fetch after the
	// batch in flight is finished returns them). inFlight is not retained;
	// only its entries' ID, Key and Attempts are read.
	FetchNext(ctx context.Context, lease Lease, limit int, inFlight []Entry) (Batch, error)
}

// Batch is what [BatchFetcher.FetchBatch] returns.
type Batch struct {
	// Entries are the claimed entries, as FindPendingBatch returns them.
	Entries []Entry
	// Parked are the entries the call parked because their stored data
	// could not be decoded, in the order it met them.
	Parked []CorruptEntry
}

// CorruptEntry is an entry a backend parked because its stored data could
// not be decoded.
type CorruptEntry struct {
	// ID identifies the entry.
	ID string
	// Topic and Key are what could be read of them ("" when nothing could).
	Topic, Key string
	// Reason names the field that did not decode and why; it is the
	// entry's LastError.
	Reason string
}

// Lease is a time-limited, exclusive right of one owner to relay one
// partition. A lease is identified by (Partition, Owner, Version): Version
// grows each time the partition changes hands, so a holder that lost its
// lease and got a new one can never be confused with its older self.
type Lease struct {
	// Partition is the partition the lease covers.
	Partition int
	// Owner is the token of the holder, as given to AcquireLease.
	Owner string
	// Version is the fencing token: strictly greater than the version of
	// every earlier lease on the same partition.
	Version int64
	// Expires is when the lease ends unless renewed, by the backend's
	// clock. The relay does not compare it with its own clock; it tracks
	// the TTL locally from the moment it asked.
	Expires time.Time
}

// Failure is the outcome of one failed delivery attempt, given to
// [Store.MarkFailed].
type Failure struct {
	// ID identifies the entry.
	ID string
	// Error describes the failure; it becomes the entry's LastError.
	// Backends may truncate it (at no less than 1024 bytes).
	Error string
	// Delay is how long after MarkFailed the entry becomes due again, by
	// the store's clock: the backend computes the due time as its own
	// "now" plus Delay, so a relay whose clock is off never makes a retry
	// come early or late. Zero means due at once; a negative Delay puts
	// the due time in the past (which orders the entry before entries due
	// since, as any earlier due time would), except that a backend may keep
	// an entry with a key from becoming due before its first due time (its
	// place in its key's order; the Redis backend does). The relay never
	// passes a negative Delay. Ignored when Park is set.
	Delay time.Duration
	// Park moves the entry to the parked (dead-letter) state.
	Park bool
}

// AllPartitions is the value a [Notifier] sends when entries may have been
// appended to any partition (for example after it reconnects and may have
// missed notifications).
const AllPartitions = -1

// Notifier is an optional interface of a [Store] that can tell a relay when
// entries were appended, and to which partitions, so the relay wakes the
// worker of that partition at once instead of at its next poll.
// Notifications are hints: they may be coalesced, delayed, lost or spurious
// (a backend may signal without new entries), and the relay keeps polling
// as the fallback. A backend never signals for a transaction that rolled
// back.
type Notifier interface {
	// Notifications returns a channel that receives, soon after a
	// transaction that appended entries commits, the partition of those
	// entries: one value per partition the transaction appended to, or
	// [AllPartitions] when the backend cannot tell which (then every
	// partition's worker wakes). The channel is closed when ctx is done or
	// the backend is closed. A slow receiver misses notifications rather
	// than blocking the backend.
	Notifications(ctx context.Context) (<-chan int, error)
}

// Membership is an optional interface of a [Store] through which the relays
// of one outbox find each other, so they can share the partitions evenly
// (see [Relay]). A backend only stores the records; the relay computes the
// assignment. Records are judged by the store's clock.
//
// Both methods are safe for concurrent use, return an error wrapping
// [ErrClosed] after Close, and pass context errors through unwrapped.
type Membership interface {
	// Heartbeat records m as a live member of the outbox's fleet for ttl
	// from now by the store's clock, replacing the earlier record of
	// m.Owner (m.Expires is ignored), and returns every member whose record
	// has not expired, m included, sorted by Owner, with Expires set from
	// the store's clock. Expired records may be deleted by it. m.Owner must
	// be non-empty, ttl positive, and m.Partitions within
	// [0, Partitions()) (else [ErrInvalidArgument]). It does not retain
	// m.Partitions; the returned slice is the caller's. One round trip.
	Heartbeat(ctx context.Context, m Member, ttl time.Duration) ([]Member, error)

	// Leave deletes the record of owner, so the other relays stop counting
	// it at once instead of when its record expires. Leaving twice, or
	// without a record, is a no-op that returns nil.
	Leave(ctx context.Context, owner string) error
}

// Member is one relay of a fleet, as it reports itself to
// [Membership.Heartbeat].
type Member struct {
	// Owner is the relay's lease owner token ([RelayOptions.Owner]).
	Owner string
	// Partitions are the partitions the relay holds, ascending.
	Partitions []int
	// MaxPartitions is the relay's cap ([RelayOptions.MaxPartitions]); 0
	// means none.
	MaxPartitions int
	// Expires is when the record ends unless renewed, by the store's
	// clock. Set by Heartbeat in the members it returns.
	Expires time.Time
}

// Canceler is an optional interface of a [Store] that can cancel an entry
// that was not delivered yet (for example a scheduled one).
type Canceler interface {
	// Cancel deletes the entry with the given ID if it is pending or
	// parked. It returns an error wrapping [ErrNotFound] when there is no
	// such entry (never appended, already sent or already cancelled). A
	// relay that fetched the entry before Cancel returned may still publish
	// it; once Cancel returns nil, the entry is never fetched again.
	Cancel(ctx context.Context, id string) error
}

// Inspector is an optional interface of a [Store] for operators: counts,
// the parked (dead-letter) entries, and requeueing them.
type Inspector interface {
	// Stats reports the counts of the outbox at one moment.
	Stats(ctx context.Context) (Stats, error)

	// Parked lists parked entries ordered by ID, starting after the ID
	// after ("" for the first page), at most limit of them (limit must be
	// positive).
	Parked(ctx context.Context, after string, limit int) ([]Entry, error)

	// Requeue moves parked entries back to pending, due now, with Attempts
	// reset to 0 and LastError kept. IDs that are not parked are ignored;
	// it reports how many entries were requeued. A requeued entry is
	// ordered as if appended now: it comes after the entries of its key
	// that are already due.
	//
	// An entry that can never be published as stored (it has no topic, or
	// its stored data does not decode) stays parked: Requeue requeues the
	// others and returns their count with a [*RequeueRefusedError] naming
	// each refused entry and why.
	Requeue(ctx context.Context, ids ...string) (int, error)
}

// Stats are the counts an [Inspector] reports.
type Stats struct {
	// Pending counts entries not yet sent and not parked, including
	// scheduled, retrying and claimed ones.
	Pending int64
	// Due counts pending entries whose next attempt time has come. Whether
	// entries claimed right now count as due is up to the backend.
	Due int64
	// Parked counts parked entries.
	Parked int64
	// OldestDue is the next attempt time of the oldest due entry, zero if
	// none is due. Now minus OldestDue is the relay's lag.
	OldestDue time.Time
}

// PartitionInspector is an optional interface of a [Store] for operators:
// the counts and the lease holder of every partition, so a stranded or
// lagging partition stands out.
type PartitionInspector interface {
	// PartitionStats reports every partition, in partition order
	// (0..Partitions()-1): its counts, as [Inspector.Stats] defines them,
	// and its live lease by the store's clock (a zero Lease, with an empty
	// Owner, when the partition is free or its lease expired). The counts of
	// all partitions add up to what Stats would report at that moment. It
	// is safe for concurrent use and makes no change; after Close it
	// returns an error wrapping [ErrClosed]; context errors are returned
	// as they are.
	PartitionStats(ctx context.Context) ([]PartitionStats, error)
}

// PartitionStats are the counts and the lease of one partition, as
// [PartitionInspector] reports them.
type PartitionStats struct {
	// Partition is the partition number.
	Partition int
	Stats
	// Lease is the partition's live lease; Owner is empty when none is.
	Lease Lease
}

// Looker is an optional interface of a [Store] for operators: one entry by
// its ID, whatever its state, with the fields a relay would see.
type Looker interface {
	// Lookup returns the entry with the given ID if it is pending (scheduled,
	// due, retrying, held back or claimed) or parked, with its partition,
	// attempts, last error (in full as stored) and created-at time. It
	// returns an error wrapping [ErrNotFound] when there is no such entry
	// (never appended, already sent or cancelled). The returned entry is
	// the caller's. It makes no change; after Close it returns an error
	// wrapping [ErrClosed]; context errors are returned as they are.
	Lookup(ctx context.Context, id string) (EntryInfo, error)
}

// EntryInfo is an entry as [Looker.Lookup] reports it.
type EntryInfo struct {
	Entry
	// Parked reports whether the entry is parked (dead-lettered).
	Parked bool
	// DueAt is when the entry is next due by the store's clock: its
	// NotBefore or append time, or the retry time of its last failure. Zero
	// for a parked entry.
	DueAt time.Time
}
