package memory

import (
	"context"
	"fmt"
	"strings"

	"github.com/outboxrelay/outbox"
)

// detach takes a pending item out of whatever structure of p holds it.
// Parked items are handled by the caller.
func (p *partition) detach(it *item) {
	switch it.state {
	case stateReady:
		p.ready.remove(it.index)
	case stateHeld:
		removeFrom(p.held, it)
	case stateClaimed:
		delete(p.claimed, it)
	}
}

// MarkSent deletes the entries with the given IDs from lease.Partition.
// IDs that are unknown, already sent or of another partition are ignored.
// An empty ids returns nil without checking the lease; otherwise a lease
// that is not live gives an error wrapping [outbox.ErrLeaseLost] and
// nothing changes. ids is not retained.
func (b *Backend) MarkSent(ctx context.Context, lease outbox.Lease, ids []string) error {
	if err := b.lock(ctx); err != nil {
		return err
	}
	defer b.mu.Unlock()
	if len(ids) == 0 {
		return nil
	}
	p, err := b.fence(lease, b.clock())
	if err != nil {
		return err
	}
	for _, id := range ids {
		it := b.entries[id]
		if it == nil || it.e.Partition != lease.Partition {
			continue
		}
		b.remove(p, it)
	}
	return nil
}

// remove deletes it from the backend, wherever it is.
func (b *Backend) remove(p *partition, it *item) {
	if it.state == stateParked {
		delete(b.parked, it.e.ID)
		b.dirty = true
	} else {
		p.detach(it)
		p.unblock(it)
	}
	delete(b.entries, it.e.ID)
}

// MarkFailed records failed attempts on entries of lease.Partition: each
// entry's Attempts grows by one, LastError becomes Error (kept in full)
// and an [outbox.Attempt] (the backend's clock, Error, lease.Owner) is
// appended to its history, of which the last [outbox.MaxAttemptHistory]
// are kept; then the entry is parked (Park) or pending again, due Delay
// after the backend's clock (Options.Now) in its original append order. A
// Deferred failure only makes the entry due Delay after the clock and
// marks it deferred: it then holds back the later entries of its key until
// it is sent, parked or requeued. IDs that are unknown, already sent,
// parked or of another partition are ignored, so a sent entry never comes
// back. An empty failures returns nil without checking the lease; a
// failure with both Park and Deferred gives an error wrapping
// [outbox.ErrInvalidArgument]; otherwise a lease that is not live gives an
// error wrapping [outbox.ErrLeaseLost]. On error nothing changes.
// failures is not retained.
func (b *Backend) MarkFailed(ctx context.Context, lease outbox.Lease, failures []outbox.Failure) error {
	if err := b.lock(ctx); err != nil {
		return err
	}
	defer b.mu.Unlock()
	if len(failures) == 0 {
		return nil
	}
	for _, f := range failures {
		if f.Park && f.Deferred {
			return fmt.Errorf("memory: MarkFailed: the failure of entry %q sets both Park and Deferred; a deferred entry was not attempted, so it cannot be parked for it: set one of them: %w", f.ID, outbox.ErrInvalidArgument)
		}
	}
	now := b.clock()
	p, err := b.fence(lease, now)
	if err != nil {
		return err
	}
	for _, f := range failures {
		it := b.entries[f.ID]
		if it == nil || it.e.Partition != lease.Partition || it.state == stateParked {
			continue
		}
		p.detach(it)
		if f.Deferred {
			it.deferred = true
		} else {
			it.deferred = false
			it.e.Attempts++
			it.e.LastError = strings.Clone(f.Error)
			it.addAttempt(outbox.Attempt{At: now, Error: it.e.LastError, Owner: lease.Owner})
		}
		if f.Park {
			p.unblock(it)
			it.state = stateParked
			it.parkedAt = now
			b.parked[it.e.ID] = it
			b.dirty = true
			continue
		}
		if it.e.Key != "" {
			addTo(p.failing, it)
		}
		it.due = now.Add(f.Delay)
		it.state = stateReady
		p.ready.push(it)
	}
	return nil
}

// Release returns entries claimed on lease.Partition to pending unchanged
// (attempts, last error, next attempt time and order). IDs that are
// unknown, not claimed or of another partition are ignored. An empty ids
// returns nil without checking the lease; otherwise a lease that is not
// live gives an error wrapping [outbox.ErrLeaseLost] and nothing changes.
// ids is not retained.
func (b *Backend) Release(ctx context.Context, lease outbox.Lease, ids []string) error {
	if err := b.lock(ctx); err != nil {
		return err
	}
	defer b.mu.Unlock()
	if len(ids) == 0 {
		return nil
	}
	p, err := b.fence(lease, b.clock())
	if err != nil {
		return err
	}
	for _, id := range ids {
		it := b.entries[id]
		if it == nil || it.e.Partition != lease.Partition || it.state != stateClaimed {
			continue
		}
		delete(p.claimed, it)
		it.state = stateReady
		p.ready.push(it)
	}
	return nil
}

// Cancel deletes the entry with the given ID if it is pending (scheduled,
// due, retrying, held back or claimed) or parked. It returns an error
// wrapping [outbox.ErrNotFound] if there is no such entry. A relay that
// claimed the entry before may still publish it; its MarkSent or
// MarkFailed is then ignored.
func (b *Backend) Cancel(ctx context.Context, id string) error {
	if err := b.lock(ctx); err != nil {
		return err
	}
	defer b.mu.Unlock()
	it := b.entries[id]
	if it == nil {
		return fmt.Errorf("memory: no pending or parked entry has ID %q (never appended, already sent or cancelled): %w", id, outbox.ErrNotFound)
	}
	b.remove(b.parts[it.e.Partition], it)
	return nil
}
