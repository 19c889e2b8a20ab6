package memory

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/outboxrelay/outbox"
)

// The optional interfaces of moving a live outbox (see the package
// documentation of outbox, move.go, and "# Moving" in doc.go).
var (
	_ outbox.Exporter = (*Backend)(nil)
	_ outbox.Importer = (*Backend)(nil)
	_ outbox.Holder   = (*Backend)(nil)
	_ outbox.Sealer   = (*Backend)(nil)
)

// importBase is the append sequence number below every imported entry's:
// imported entries are numbered importBase+1, importBase+2, ... in the
// order imported, all below the appended entries' numbers (which start at
// 1), so they come before every appended entry in each key's order.
const importBase = math.MinInt64

// errSealed is returned by AppendInTx and Tx.Commit on a sealed backend.
var errSealed = fmt.Errorf("memory: the outbox is sealed (it was moved to another outbox); append to its destination, or Unseal it to roll the move back: %w", outbox.ErrSealed)

// ExportBatch returns up to limit entries of lease.Partition that are not
// sent, whatever their state (due, scheduled, retrying, held back, claimed
// or parked), in append order (a requeued entry counts as appended when it
// was requeued; imported entries come first, in the order imported), as
// [outbox.EntryInfo] values owned by the caller, with their attempt
// history and whether they are deferred. It changes nothing. A
// limit that is not positive gives an error wrapping
// [outbox.ErrInvalidArgument]; a lease that is not live one wrapping
// [outbox.ErrLeaseLost]. It costs O(n log n) in the partition's entries.
// See [outbox.Exporter].
func (b *Backend) ExportBatch(ctx context.Context, lease outbox.Lease, limit int) ([]outbox.EntryInfo, error) {
	if err := b.lock(ctx); err != nil {
		return nil, err
	}
	defer b.mu.Unlock()
	if err := outbox.CheckFetch(len(b.parts), lease, limit); err != nil {
		return nil, fmt.Errorf("memory: ExportBatch: %w", err)
	}
	p, err := b.fence(lease, b.clock())
	if err != nil {
		return nil, err
	}
	items := make([]*item, 0, len(p.ready)+len(p.claimed))
	items = append(items, p.ready...)
	for _, set := range p.held {
		for it := range set {
			items = append(items, it)
		}
	}
	for it := range p.claimed {
		items = append(items, it)
	}
	for _, it := range b.parked {
		if it.e.Partition == lease.Partition {
			items = append(items, it)
		}
	}
	slices.SortFunc(items, func(x, y *item) int { return cmp.Compare(x.seq, y.seq) })
	items = items[:min(limit, len(items))]
	out := make([]outbox.EntryInfo, len(items))
	for i, it := range items {
		out[i] = it.info()
	}
	return out, nil
}

// RemoveExported deletes the entries with the given IDs from
// lease.Partition, whatever their state, without archiving them. IDs that
// are unknown, already gone or of another partition are ignored. An empty
// ids returns nil without checking the lease; otherwise a lease that is
// not live gives an error wrapping [outbox.ErrLeaseLost] and nothing
// changes. ids is not retained. See [outbox.Exporter].
func (b *Backend) RemoveExported(ctx context.Context, lease outbox.Lease, ids []string) error {
	// The memory backend keeps no archive: MarkSent already deletes an
	// entry in any state.
	return b.MarkSent(ctx, lease, ids)
}

// Import adds entries exported from another outbox, as they were there,
// each to the partition its key maps to here. It returns how many it
// added: an entry whose ID is already stored (imported or appended), or
// that repeats an ID earlier in the call, is skipped.
//
// Imported entries take append sequence numbers below every appended
// entry's, in the order imported, so an imported entry with Attempts > 0,
// or Deferred, that is not parked holds back the appended entries of its
// key, as a failing entry does, whenever they were appended; among due entries,
// which come out by due time and then sequence, an imported one comes
// before the appended entries of its key that are due no earlier than the
// time the backend was first held (every one appended since). A due imported entry
// (DueAt not after the backend's clock, or zero; or, never attempted and
// without NotBefore, so due at its source since its append, DueAt less
// than a minute ahead of the clock: the skew between the two clocks) is
// made due at the
// earlier of its DueAt and the time the backend was first held
// ([Backend.Hold]), or the clock's now when it is not held; an entry due
// later keeps its DueAt. A parked entry is stored parked. The attempt
// history is kept (its last [outbox.MaxAttemptHistory] attempts), and
// Deferred for an entry that is not parked.
//
// An entry with an empty ID, an ID longer than [outbox.MaxIDLen] bytes, a
// topic longer than [outbox.MaxTopicLen] bytes or empty while the entry is
// not parked, or a key longer than [outbox.MaxKeyLen] bytes fails the call
// with an error wrapping [outbox.ErrInvalidEntry] naming it, and nothing
// is added. Options.Limits and Options.KeySequence do not apply. No
// entries does nothing and returns 0, nil. The entries are copied (payload
// and headers included); the slice is not retained. Subscribers to
// [Backend.Notifications] are signalled with the partitions entries were
// added to. See [outbox.Importer].
func (b *Backend) Import(ctx context.Context, entries []outbox.EntryInfo) (int, error) {
	if err := b.lock(ctx); err != nil {
		return 0, err
	}
	defer b.mu.Unlock()
	for i, e := range entries {
		if err := checkImported(e); err != nil {
			return 0, fmt.Errorf("memory: Import: entry %d (ID %q): %s: %w", i, e.ID, err, outbox.ErrInvalidEntry)
		}
	}
	now := b.clock()
	bound := now
	if b.held {
		bound = b.holdSince
	}
	var added []int // partitions imported into, in first-import order
	n := 0
	for _, info := range entries {
		if _, ok := b.entries[info.ID]; ok {
			continue
		}
		e := info.Entry.Clone()
		e.Partition = outbox.PartitionOf(e.Key, len(b.parts))
		e.NotBefore = e.NotBefore.Round(0)
		e.CreatedAt = e.CreatedAt.Round(0)
		b.imported++
		it := &item{e: e, seq: importBase + b.imported}
		if n := len(info.History); n > 0 {
			it.history = slices.Clone(info.History[max(0, n-outbox.MaxAttemptHistory):])
		}
		b.entries[e.ID] = it
		n++
		if !slices.Contains(added, e.Partition) {
			added = append(added, e.Partition)
		}
		if info.Parked {
			it.state = stateParked
			it.parkedAt = now // the time it was parked in the source is not known
			b.parked[e.ID] = it
			b.dirty = true
			continue
		}
		due := info.DueAt.Round(0)
		if (!due.After(now) || dueAtSource(info, now)) && (due.IsZero() || due.After(bound)) {
			due = bound
		}
		it.due = due
		it.deferred = info.Deferred
		p := b.parts[e.Partition]
		p.admit(it)
		if (e.Attempts > 0 || it.deferred) && e.Key != "" {
			addTo(p.failing, it)
		}
	}
	b.notify(added)
	return n, nil
}

// importSkew is how far ahead of the backend's clock the DueAt of an
// entry that was due at its source may be and still count as due here
// (the two stores' clock skew), as the Redis backend's import.lua takes it.
const importSkew = time.Minute

// dueAtSource reports whether e was due at its source whatever its DueAt
// says by this clock: never attempted, not deferred and without a
// NotBefore, an entry is due from its append on, so a DueAt ahead of now
// by less than importSkew is the skew between the source's clock and this
// one.
func dueAtSource(e outbox.EntryInfo, now time.Time) bool {
	return e.Attempts <= 0 && !e.Deferred && e.NotBefore.IsZero() && !e.DueAt.After(now.Add(importSkew))
}

// checkImported checks what Import must be able to store of e.
func checkImported(e outbox.EntryInfo) error {
	switch {
	case e.ID == "":
		return fmt.Errorf("the ID is empty")
	case len(e.ID) > outbox.MaxIDLen:
		return fmt.Errorf("the ID is %d bytes, the limit is %d", len(e.ID), outbox.MaxIDLen)
	case e.Topic == "" && !e.Parked:
		return fmt.Errorf("the topic is empty and the entry is not parked")
	case len(e.Topic) > outbox.MaxTopicLen:
		return fmt.Errorf("the topic is %d bytes, the limit is %d", len(e.Topic), outbox.MaxTopicLen)
	case len(e.Key) > outbox.MaxKeyLen:
		return fmt.Errorf("the key is %d bytes, the limit is %d", len(e.Key), outbox.MaxKeyLen)
	}
	return nil
}

// Hold holds the backend: FindPendingBatch claims and returns nothing
// until [Backend.Unhold]. Holding a held backend keeps the time it was
// first held and replaces the reason. See [outbox.Holder].
func (b *Backend) Hold(ctx context.Context, reason string) error {
	if err := b.lock(ctx); err != nil {
		return err
	}
	defer b.mu.Unlock()
	if !b.held {
		b.held = true
		b.holdSince = b.clock()
	}
	b.holdReason = reason
	return nil
}

// Unhold releases the backend; unholding a backend that is not held is a
// no-op. It does not signal [Backend.Notifications]: relays find the due
// entries at their next poll. See [outbox.Holder].
func (b *Backend) Unhold(ctx context.Context) error {
	if err := b.lock(ctx); err != nil {
		return err
	}
	defer b.mu.Unlock()
	b.held, b.holdReason, b.holdSince = false, "", time.Time{}
	return nil
}

// HoldState reports whether the backend is held, why and since when (by
// its clock). See [outbox.Holder].
func (b *Backend) HoldState(ctx context.Context) (outbox.HoldState, error) {
	if err := b.lock(ctx); err != nil {
		return outbox.HoldState{}, err
	}
	defer b.mu.Unlock()
	return outbox.HoldState{Held: b.held, Reason: b.holdReason, Since: b.holdSince}, nil
}

// Seal seals the backend: AppendInTx and [Tx.Commit] fail with an error
// wrapping [outbox.ErrSealed] from then on. Entries become visible only at
// Commit, under the backend's lock, which Seal takes too, so a transaction
// either committed before Seal returned or fails at Commit. Sealing a
// sealed backend is a no-op. See [outbox.Sealer].
func (b *Backend) Seal(ctx context.Context) error {
	if err := b.lock(ctx); err != nil {
		return err
	}
	defer b.mu.Unlock()
	b.sealed = true
	return nil
}

// Unseal accepts appends again; unsealing a backend that is not sealed is
// a no-op. See [outbox.Sealer].
func (b *Backend) Unseal(ctx context.Context) error {
	if err := b.lock(ctx); err != nil {
		return err
	}
	defer b.mu.Unlock()
	b.sealed = false
	return nil
}

// Sealed reports whether the backend is sealed. See [outbox.Sealer].
func (b *Backend) Sealed(ctx context.Context) (bool, error) {
	if err := b.lock(ctx); err != nil {
		return false, err
	}
	defer b.mu.Unlock()
	return b.sealed, nil
}
