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
	// been attempted (Attempts > 0) or deferred ([Failure.Deferred]) and
	// is neither sent nor parked: a failing entry holds back the later
	// entries of its key, and only of its key, until it is sent or parked.
	// Entries with an empty Key are unordered and never held back. A
	// [Pauser]'s pause excludes more (see there).
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
	// increments the entry's Attempts, stores Error as LastError, appends
	// an [Attempt] (the store's time, Error, lease.Owner) to the entry's
	// history, keeping the last [MaxAttemptHistory], and either
	// re-schedules the entry Delay after now by the store's clock (never
	// by the caller's) or, when Park is set, parks it (terminal: kept for
	// inspection and requeue, never fetched again until requeued). A
	// failed, not parked entry keeps holding back the later entries of its
	// key. A [Failure.Deferred] failure is not an attempt: it only
	// re-schedules the entry (see there). IDs that are unknown or already
	// sent are ignored: MarkFailed never brings a sent entry back. An
	// empty failures does nothing and returns nil; a failure with both
	// Park and Deferred set is rejected with [ErrInvalidArgument] before
	// anything is written. failures is not retained.
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
	// Deferred reports that the relay did not hand the entry to the sink
	// (its topic's circuit breaker is open), so this is not an attempt: the
	// backend re-schedules the entry Delay after now, as for a retry, and
	// leaves its Attempts, LastError and history as they are; Error is
	// not stored. From then until it is sent, parked or requeued, the
	// entry holds back the later entries of its key as a failed entry
	// does, so that they are not delivered before it. Park must be false.
	Deferred bool
}
