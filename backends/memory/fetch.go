package memory

import (
	"context"
	"fmt"
	"math"

	"github.com/outboxrelay/outbox"
)

// FindPendingBatch claims up to limit due, eligible entries of
// lease.Partition in (next attempt time, append order) and returns deep
// copies of them. It skips entries of paused topics and entries held back
// by their key (behind a failing, deferred or paused entry), and does not
// return entries already claimed; a paused partition returns nothing. It returns an
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
	if b.held || !p.paused.IsZero() {
		return nil, nil
	}
	var out []outbox.Entry
	for len(out) < limit && len(p.ready) > 0 && !p.ready[0].due.After(now) {
		it := p.ready.pop()
		if p.blocked(it) {
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
// FindPendingBatch: a claimed entry that was attempted or deferred, or is
// of a paused topic, keeps holding back the later entries of its key, and
// one that was not holds back nothing.
// It parks nothing (what this backend holds always decodes), so
// Batch.Parked is empty.
func (b *Backend) FetchNext(ctx context.Context, lease outbox.Lease, limit int, inFlight []outbox.Entry) (outbox.Batch, error) {
	entries, err := b.FindPendingBatch(ctx, lease, limit)
	return outbox.Batch{Entries: entries}, err
}

// blocked reports whether a fetch must set it aside: its topic is paused
// (see [Backend.PauseTopic]) or it is held back by its key.
func (p *partition) blocked(it *item) bool {
	_, paused := p.topics[it.e.Topic]
	return paused || p.heldBack(it)
}

// heldBack reports whether an entry of its key appended earlier holds it
// back: one that is failing (attempted or deferred) or of a paused topic.
func (p *partition) heldBack(it *item) bool {
	if it.e.Key == "" {
		return false
	}
	return anyBefore(p.failing[it.e.Key], it.seq) || anyBefore(p.pausedKeys[it.e.Key], it.seq)
}

// anyBefore reports whether set holds an item appended before seq.
func anyBefore(set map[*item]struct{}, seq int64) bool {
	for f := range set {
		if f.seq < seq {
			return true
		}
	}
	return false
}

// firstSeq returns the smallest append sequence in set, math.MaxInt64 when
// set is empty.
func firstSeq(set map[*item]struct{}) int64 {
	first := int64(math.MaxInt64)
	for f := range set {
		first = min(first, f.seq)
	}
	return first
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

// admit puts a new pending item (appended, imported or requeued) into the
// heap, and among the entries that hold back their key when its topic is
// paused.
func (p *partition) admit(it *item) {
	it.state = stateReady
	p.ready.push(it)
	if _, paused := p.topics[it.e.Topic]; paused && it.e.Key != "" {
		addTo(p.pausedKeys, it)
	}
}

// unblock records that it no longer holds back its key (sent, parked,
// cancelled or removed) and moves the entries of its key that nothing else
// holds back to the heap.
func (p *partition) unblock(it *item) {
	if it.e.Key == "" {
		return
	}
	failing := removeFrom(p.failing, it)
	paused := removeFrom(p.pausedKeys, it)
	if failing || paused {
		p.release(it.e.Key)
	}
}

// release moves the set-aside entries of key that are no longer blocked
// back to the heap, where they take their place by due time and append
// order.
func (p *partition) release(key string) {
	set := p.held[key]
	if len(set) == 0 {
		return
	}
	first := int64(math.MaxInt64)
	if key != "" {
		first = min(firstSeq(p.failing[key]), firstSeq(p.pausedKeys[key]))
	}
	for h := range set {
		if _, paused := p.topics[h.e.Topic]; paused || first < h.seq {
			continue
		}
		removeFrom(p.held, h)
		h.state = stateReady
		p.ready.push(h)
	}
}

// eachPending calls f for every pending entry of p: in the heap, set
// aside or claimed.
func (p *partition) eachPending(f func(*item)) {
	for _, it := range p.ready {
		f(it)
	}
	for _, set := range p.held {
		for it := range set {
			f(it)
		}
	}
	for it := range p.claimed {
		f(it)
	}
}
