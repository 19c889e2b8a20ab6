package memory

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/outboxrelay/outbox"
)

// Stats reports the counts at one moment. Pending counts every unsent,
// unparked entry (scheduled, due, retrying, held back and claimed); Due
// and OldestDue cover those among them whose next attempt time has come,
// claimed and held-back entries included.
func (b *Backend) Stats(ctx context.Context) (outbox.Stats, error) {
	if err := b.lock(ctx); err != nil {
		return outbox.Stats{}, err
	}
	defer b.mu.Unlock()
	now := b.clock()
	s := outbox.Stats{Parked: int64(len(b.parked))}
	for _, p := range b.parts {
		p.addStats(&s, now)
	}
	return s, nil
}

// PartitionStats reports the counts (as [Backend.Stats] defines them), the
// live lease, the oldest due entry's ID and the number of blocked keys (as
// [Backend.BlockedKeys] lists them) of every partition at one moment. See
// [outbox.PartitionInspector].
func (b *Backend) PartitionStats(ctx context.Context) ([]outbox.PartitionStats, error) {
	if err := b.lock(ctx); err != nil {
		return nil, err
	}
	defer b.mu.Unlock()
	now := b.clock()
	out := make([]outbox.PartitionStats, len(b.parts))
	for i, p := range b.parts {
		out[i].Partition = i
		if oldest := p.addStats(&out[i].Stats, now); oldest != nil {
			out[i].OldestDueID = oldest.e.ID
		}
		if p.live(now) {
			out[i].Lease = outbox.Lease{Partition: i, Owner: p.owner, Version: p.version, Expires: p.expires}
		}
		for _, h := range p.heads() {
			if p.blocksKey(h.head) {
				out[i].BlockedKeys++
			}
		}
	}
	for _, it := range b.parked {
		out[it.e.Partition].Parked++
	}
	return out, nil
}

// addStats adds p's pending entries (not its parked ones) to s and returns
// p's oldest due entry (first by due time, then append order), nil when
// none is due.
func (p *partition) addStats(s *outbox.Stats, now time.Time) (oldest *item) {
	note := func(it *item, n int64) {
		if n == 0 {
			return
		}
		s.Due += n
		if oldest == nil || less(it, oldest) {
			oldest = it
		}
		if s.OldestDue.IsZero() || it.due.Before(s.OldestDue) {
			s.OldestDue = it.due
		}
	}
	s.Pending += int64(len(p.ready) + len(p.claimed))
	if n, _ := p.ready.countDue(now); n > 0 {
		note(p.ready[0], n)
	}
	for _, set := range p.held {
		s.Pending += int64(len(set))
		for it := range set {
			if !it.due.After(now) {
				note(it, 1)
			}
		}
	}
	for it := range p.claimed {
		if !it.due.After(now) {
			note(it, 1)
		}
	}
	return oldest
}

// Lookup returns the pending or parked entry with the given ID. See
// [outbox.Looker].
func (b *Backend) Lookup(ctx context.Context, id string) (outbox.EntryInfo, error) {
	if err := b.lock(ctx); err != nil {
		return outbox.EntryInfo{}, err
	}
	defer b.mu.Unlock()
	it := b.entries[id]
	if it == nil {
		return outbox.EntryInfo{}, fmt.Errorf("memory: no pending or parked entry has ID %q (never appended, already sent or cancelled): %w", id, outbox.ErrNotFound)
	}
	return it.info(), nil
}

// Parked lists parked entries ordered by ID, starting after the ID after
// ("" for the first page), at most limit of them. A limit that is not
// positive gives an error wrapping [outbox.ErrInvalidArgument]. The
// returned entries are copies owned by the caller.
func (b *Backend) Parked(ctx context.Context, after string, limit int) ([]outbox.Entry, error) {
	if err := b.lock(ctx); err != nil {
		return nil, err
	}
	defer b.mu.Unlock()
	if limit <= 0 {
		return nil, fmt.Errorf("memory: Parked limit is %d; it must be positive: %w", limit, outbox.ErrInvalidArgument)
	}
	if b.dirty {
		b.sorted = b.sorted[:0]
		for id := range b.parked {
			b.sorted = append(b.sorted, id)
		}
		slices.Sort(b.sorted)
		b.dirty = false
	}
	i, found := slices.BinarySearch(b.sorted, after)
	if found {
		i++
	}
	var out []outbox.Entry
	for _, id := range b.sorted[i:min(i+limit, len(b.sorted))] {
		out = append(out, b.parked[id].e.Clone())
	}
	return out, nil
}

// Requeue moves the parked entries with the given IDs back to pending, due
// now, with Attempts reset to 0, LastError and the attempt history kept
// (and no longer deferred). A requeued entry is
// ordered as if appended now: it gets a new append sequence number, so it
// comes after the entries already due (entries requeued by one call keep
// their original order among themselves). IDs that are not parked are
// ignored. It reports how many entries it requeued. A parked entry without
// a topic (only [Backend.Import] stores one) stays parked: the others are
// requeued and their count comes with an [*outbox.RequeueRefusedError]
// naming it.
func (b *Backend) Requeue(ctx context.Context, ids ...string) (int, error) {
	if err := b.lock(ctx); err != nil {
		return 0, err
	}
	defer b.mu.Unlock()
	var items []*item
	var refused *outbox.RequeueRefusedError
	for _, id := range ids {
		it := b.parked[id]
		if it == nil {
			continue
		}
		if it.e.Topic == "" {
			// Only Import stores an entry without a topic (parked).
			if refused == nil {
				refused = &outbox.RequeueRefusedError{}
			}
			refused.Refused = append(refused.Refused, outbox.Refusal{ID: id, Reason: "it has no topic (it was imported parked without one)"})
			continue
		}
		delete(b.parked, id)
		b.dirty = true
		items = append(items, it)
	}
	slices.SortFunc(items, func(x, y *item) int { return cmp.Compare(x.seq, y.seq) })
	now := b.clock()
	for _, it := range items {
		b.seq++
		it.seq = b.seq
		it.e.Attempts = 0
		it.deferred = false
		it.due = now
		b.parts[it.e.Partition].admit(it)
	}
	if refused != nil {
		return len(items), fmt.Errorf("memory: Requeue: %w", refused)
	}
	return len(items), nil
}
