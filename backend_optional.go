package outbox

import (
	"context"
	"fmt"
	"strings"
	"time"
)

// The optional interfaces of the SPI. A [Store] implements any of them it
// can; the relay, the CLI and the dashboard detect each by a type
// assertion and do without it when it is missing. The migration SPI
// ([Exporter], [Importer], [Holder], [Sealer]) is in backend_move.go.

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

// PollAdvisor is an optional interface of a [Store] whose relays learn of
// new entries mostly by polling (its [Notifier], if any, only hears of
// appends made in the same process): it names the poll interval the
// backend chose from the cost of an idle poll and the latency it gives.
// [NewRelay] uses it when [RelayOptions].PollInterval is zero, instead of
// [DefaultPollInterval].
type PollAdvisor interface {
	// PollInterval is the relay's default poll interval with this store;
	// a value that is not positive is ignored.
	PollInterval() time.Duration
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
	// Host is the name of the machine the relay runs on, Version the
	// version of the program that runs it, and Started when it started,
	// by its own clock: what an operator needs to tell the relays of a
	// fleet apart. A backend stores them as given (Host and Version up to
	// 255 bytes; longer values are cut).
	Host, Version string
	Started       time.Time
	// Expires is when the record ends unless renewed, by the store's
	// clock. Set by Heartbeat in the members it returns.
	Expires time.Time
	// Renewed is when the member last heartbeated, by the store's clock.
	// Set by Heartbeat in the members it returns, and by
	// [MemberLister.Members].
	Renewed time.Time
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
	// reset to 0, LastError and the attempt history kept. IDs that are not parked are ignored;
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
	// OldestDueID is the ID of the partition's oldest due entry (the one
	// OldestDue is the due time of), "" when none is due. Filled by
	// backends that implement [Lister].
	OldestDueID string
	// BlockedKeys counts the partition's keys that [Lister.BlockedKeys]
	// would list. Filled by backends that implement [Lister].
	BlockedKeys int64
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
	// Deferred reports that an open breaker deferred the entry
	// ([Failure.Deferred]) and it was not attempted since: it is pending
	// and holds back its key by the deferral. A later failed attempt (a
	// retry or a park), a requeue or its delivery clears it.
	Deferred bool
	// History is the entry's last attempts ([MaxAttemptHistory] at most),
	// oldest first (kept across Requeue); nil when it was never attempted.
	History []Attempt
}

// RequeueRefusedError is the error [Inspector.Requeue] returns, together
// with the count of the entries it did requeue, when it left parked entries
// parked because they can never be published as stored: no topic, or
// stored data that does not decode. Fix such an entry in the store and
// requeue it again, or cancel it. It wraps [ErrNotRequeueable].
type RequeueRefusedError struct {
	// Refused are the entries left parked, in the order of the IDs given.
	Refused []Refusal
}

// Refusal is one entry [Inspector.Requeue] left parked, and why.
type Refusal struct {
	ID     string
	Reason string
}

func (e *RequeueRefusedError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "outbox: %d parked %s left parked: %s can never be published as stored (fix the stored data and requeue again, or cancel)",
		len(e.Refused), plural(len(e.Refused), "entry", "entries"), plural(len(e.Refused), "it", "they"))
	for i, r := range e.Refused {
		if i == 10 {
			fmt.Fprintf(&b, "; and %d more", len(e.Refused)-i)
			break
		}
		fmt.Fprintf(&b, "; %q: %s", r.ID, r.Reason)
	}
	return b.String()
}

// Unwrap makes errors.Is(err, ErrNotRequeueable) true.
func (e *RequeueRefusedError) Unwrap() error { return ErrNotRequeueable }

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
