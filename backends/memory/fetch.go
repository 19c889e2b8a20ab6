package memory

import (
	"context"
	"fmt"

	"github.com/outboxrelay/outbox"
)

// FindPendingBatch claims up to limit due, eligible entries of
// lease.Partition in (next attempt time, append order) and returns deep
// copies of them. It skips entries held back behind a failing entry of
// their key and does not return entries already claimed. It returns an
// error wrapping [outbox.ErrInvalidArgument] if limit is not positive and
// one wrapping [outbox.ErrLeaseLost] if lease is not live; then nothing
// changes.
func (b *Backend) FindPendingBatch(ctx context.Context, lease outbox.Lease, limit int) ([]outbox.Entry, error) {
	if err := b.lock(ctx); err != nil {
		return nil, err
	}
	defer b.mu.Unlock()
	if err := outbox.CheckFetch(len(b.parts), lease, limit); err != nil {
		return nil, fmt.Errorf("memory: FindPendingBatch: %w", err)
	}
	now := b.clock()
	p, err := b.fence(lease, now)
	if err != nil {
		return nil, err
	}
	if b.held {
		return nil, nil
	}
	var out []outbox.Entry
	for len(out) < limit && len(p.ready) > 0 && !p.ready[0].due.After(now) {
		it := p.ready.pop()
		if p.heldBack(it) {
			it.state = stateHeld
			addTo(p.held, it)
			continue
		}
		it.state = stateClaimed
		p.claimed[it] = struct{}{}
		if out == nil {
			out = make([]outbox.Entry, 0, min(limit, len(p.ready)+1))
		}
		out = append(out, it.e.Clone())
	}
	return out, nil
}

// FetchNext claims the batch behind inFlight, the lease's unfinished
// claims, while they are still in flight (see [outbox.Prefetcher]). This
// backend never returns a claimed entry again, so FetchNext is
// FindPendingBatch: a claimed entry that was attempted keeps holding back
// the later entries of its key, and one that was not holds back nothing.
// It parks nothing (what this backend holds always decodes), so
// Batch.Parked is empty.
func (b *Backend) FetchNext(ctx context.Context, lease outbox.Lease, limit int, inFlight []outbox.Entry) (outbox.Batch, error) {
	entries, err := b.FindPendingBatch(ctx, lease, limit)
	return outbox.Batch{Entries: entries}, err
}

// heldBack reports whether an entry of its key appended earlier is
// failing.
func (p *partition) heldBack(it *item) bool {
	if it.e.Key == "" {
		return false
	}
	for f := range p.failing[it.e.Key] {
		if f.seq < it.seq {
			return true
		}
	}
	return false
}

// addTo adds it to the set of its key in m.
func addTo(m map[string]map[*item]struct{}, it *item) {
	set := m[it.e.Key]
	if set == nil {
		set = make(map[*item]struct{})
		m[it.e.Key] = set
	}
	set[it] = struct{}{}
}

// removeFrom removes it from the set of its key in m and reports whether
// it was there.
func removeFrom(m map[string]map[*item]struct{}, it *item) bool {
	set := m[it.e.Key]
	if _, ok := set[it]; !ok {
		return false
	}
	delete(set, it)
	if len(set) == 0 {
		delete(m, it.e.Key)
	}
	return true
}

// stopFailing records that it no longer fails (sent, parked or cancelled)
// and moves the entries of its key that it alone held back to the heap.
func (p *partition) stopFailing(it *item) {
	if it.e.Key == "" || !removeFrom(p.failing, it) {
		return
	}
	for h := range p.held[it.e.Key] {
		if !p.heldBack(h) {
			removeFrom(p.held, h)
			h.state = stateReady
			p.ready.push(h)
		}
	}
}
