package memory

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/outboxrelay/outbox"
)

// PurgeParked removes for good at most limit entries parked before before
// (by the backend's clock when [Backend.MarkFailed] parked them, or when
// [Backend.Import] stored them parked), oldest park first (ties by append
// order), exactly as [Backend.Cancel] removes a parked entry, and returns
// their IDs. more reports that entries parked before before remain. A
// requeued entry is not parked; parked again, its park time is the new
// one. Pending entries are never removed. A limit that is not positive
// gives an error wrapping [outbox.ErrInvalidArgument]. It runs under the
// backend's lock and costs O(p log p) in the parked entries p. See
// [outbox.ParkedPurger].
func (b *Backend) PurgeParked(ctx context.Context, before time.Time, limit int) (ids []string, more bool, err error) {
	if err := b.lock(ctx); err != nil {
		return nil, false, err
	}
	defer b.mu.Unlock()
	if limit <= 0 {
		return nil, false, fmt.Errorf("memory: PurgeParked: limit is %d; it must be positive: %w", limit, outbox.ErrInvalidArgument)
	}
	var old []*item
	for _, it := range b.parked {
		if it.parkedAt.Before(before) {
			old = append(old, it)
		}
	}
	slices.SortFunc(old, func(x, y *item) int {
		if c := x.parkedAt.Compare(y.parkedAt); c != 0 {
			return c
		}
		return cmp.Compare(x.seq, y.seq)
	})
	more = len(old) > limit
	old = old[:min(limit, len(old))]
	ids = make([]string, len(old))
	for i, it := range old {
		ids[i] = it.e.ID
		b.remove(b.parts[it.e.Partition], it)
	}
	return ids, more, nil
}
