package outbox

import (
	"context"
	"errors"
	"time"
)

// The optional interfaces in this file let a mover (package move, `outbox
// move`) carry a live outbox to another one: another backend, or the same
// backend with another partition count. See docs/migration.md for the
// protocol they serve:
//
//  1. the destination is held ([Holder]): its relays fetch nothing while
//     services, switched over one by one, append to it;
//  2. once every service appends to the destination, the source is sealed
//     ([Sealer]): an append to it fails from then on;
//  3. the mover takes each source partition's lease, reads its entries in
//     order ([Exporter]), adds them to the destination ahead of the
//     entries appended there ([Importer]) and removes them from the source;
//  4. when the source is sealed and empty, the destination is released and
//     its relays deliver, each key's moved entries before its new ones.

// ErrSealed means an append was refused because the outbox is sealed: it
// was moved to another outbox (see [Sealer]). Append to the destination
// instead.
var ErrSealed = errors.New("outbox: sealed: this outbox was moved; append to its destination")

// Exporter is an optional interface of a [Store] that can be moved from:
// it reads every entry of a partition that is not sent, whatever its state,
// and removes entries once they are safe elsewhere.
type Exporter interface {
	// ExportBatch returns up to limit entries of lease.Partition that are
	// neither sent, cancelled nor removed: due, scheduled, waiting for a
	// retry, held back, claimed under an earlier lease of the partition, or
	// parked, with their delivery state ([EntryInfo]: attempts, last error,
	// due time, parked). Entries come in the partition's append order (a
	// requeued entry counts as appended when it was requeued), so the
	// entries of a key come in the order they were appended (which is
	// their delivery order but for a scheduled entry, whose place in its
	// key's order is its NotBefore: see Importer). It claims nothing and changes
	// nothing; a call after RemoveExported returns the entries after those
	// removed. It is fenced like FindPendingBatch: a lease that is not
	// live is refused with [ErrLeaseLost]. limit must be positive.
	ExportBatch(ctx context.Context, lease Lease, limit int) ([]EntryInfo, error)

	// RemoveExported deletes the entries with the given IDs from
	// lease.Partition, whatever their state, without archiving them as
	// sent. It is fenced by lease and idempotent: IDs that are unknown or
	// already gone are ignored. An empty ids does nothing.
	RemoveExported(ctx context.Context, lease Lease, ids []string) error
}

// Importer is an optional interface of a [Store] that can be moved to.
type Importer interface {
	// Import adds entries exported from another outbox, as they were
	// there: ID, topic, key, payload, headers, NotBefore, created-at time,
	// attempts, last error, due time and parked state. Each goes to the
	// partition its key maps to here (PartitionOf(Key, Partitions()); the
	// Partition field is ignored), so the partition count may differ from
	// the source's. It returns how many entries it added.
	//
	// Idempotent: an entry whose ID the outbox already holds (imported or
	// appended) is skipped, so an interrupted move can import again.
	//
	// Order: imported entries come before every entry appended with
	// AppendInTx since the outbox was first held ([Holder]), in each key's
	// order, and among themselves in the order imported (calls in order,
	// entries of a call in slice order). A move holds an empty
	// destination before anything is appended to it, so there that is
	// every appended entry; an entry appended before the hold (or, without
	// a hold, before the import) and due earlier than the imported one may
	// come out first. So an imported entry that was attempted and waits
	// for its retry holds back the appended entries of its key, and the
	// due time of an imported entry that is due is lowered, if need be, to
	// the time the outbox was first held (the store's now when it is not
	// held), so that it comes out before the appended entries of its key
	// even across clock skew between the two stores: a never-attempted
	// entry without NotBefore whose due time is less than a minute ahead
	// of the store's clock counts as due. A scheduled or retrying entry
	// due later keeps its due time. Lowering makes due entries tie, and
	// ties go by import order, which is the source's append order: a
	// scheduled entry appended before a later entry of its key, both due
	// after the destination was held and both still in the source when it
	// is moved, comes out before it (in the source it would have come out
	// at its NotBefore, after it).
	//
	// Import checks what it must store: a non-empty ID of at most
	// [MaxIDLen] bytes, a topic of at most [MaxTopicLen] bytes (empty only
	// for a parked entry) and a key of at most [MaxKeyLen] bytes; an entry
	// that breaks one fails the call with an error wrapping
	// [ErrInvalidEntry] naming it, and nothing of the call is added. It
	// does not apply the outbox's Limits (the entries were accepted once)
	// and does not number keys ([HeaderKeySeq] headers are kept as they
	// were).
	Import(ctx context.Context, entries []EntryInfo) (int, error)
}

// Holder is an optional interface of a [Store] whose relays can be held
// back: while the outbox is held, FindPendingBatch (and FetchBatch) claim
// and return nothing, so nothing is delivered, whatever relay runs.
// Appends, leases, stats and every operator call work as usual.
type Holder interface {
	// Hold holds the outbox with a reason operators see (status, logs).
	// Holding a held outbox keeps its first Since and replaces the reason.
	// Entries fetched before Hold returned may still be delivered.
	Hold(ctx context.Context, reason string) error
	// Unhold releases the outbox; relays deliver at their next fetch.
	// Unholding an outbox that is not held is a no-op.
	Unhold(ctx context.Context) error
	// HoldState reports whether the outbox is held, why and since when
	// (by the store's clock).
	HoldState(ctx context.Context) (HoldState, error)
}

// HoldState is what [Holder.HoldState] reports.
type HoldState struct {
	Held   bool
	Reason string
	// Since is when the outbox was first held (zero when not held).
	Since time.Time
}

// Sealer is an optional interface of a [Store] that can be sealed: once
// sealed, every append fails with an error wrapping [ErrSealed], so a
// service instance still configured for the old outbox fails loudly
// instead of writing where no relay looks. Entries already in the outbox
// stay, and relays, exports, requeues and every operator call work on them
// as before.
type Sealer interface {
	// Seal seals the outbox. An append in a transaction that is still open
	// when Seal is called either commits before Seal returns or fails; once
	// Seal returns, no append commits. Sealing a sealed outbox is a no-op.
	Seal(ctx context.Context) error
	// Unseal accepts appends again (rolling a move back). Unsealing an
	// outbox that is not sealed is a no-op.
	Unseal(ctx context.Context) error
	// Sealed reports whether the outbox is sealed.
	Sealed(ctx context.Context) (bool, error)
}
