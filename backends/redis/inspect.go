package redisoutbox

import (
	"context"
	"fmt"
	"sort"
	"time"

	"github.com/outboxrelay/outbox"
)

// Notifications subscribes to the outbox's pub/sub channel, on which every
// append that adds entries publishes inside its EXEC. The subscription is
// confirmed before Notifications returns, so a commit after that is seen.
// The channel has a buffer of one: bursts coalesce, a slow receiver misses
// nothing but duplicates. It is closed when ctx is done or the backend is
// closed. Pub/sub is a hint: messages published while the subscription
// reconnects are lost, and the relay keeps polling. With Options.NoNotify
// the channel never fires.
func (b *Backend) Notifications(ctx context.Context) (<-chan struct{}, error) {
	if err := b.check(ctx); err != nil {
		return nil, err
	}
	ch := make(chan struct{}, 1)
	if b.channel == "" {
		go func() {
			defer close(ch)
			select {
			case <-ctx.Done():
			case <-b.done:
			}
		}()
		return ch, nil
	}
	sub := b.client.Subscribe(ctx, b.channel)
	if _, err := sub.Receive(ctx); err != nil {
		_ = sub.Close()
		return nil, b.wrap(ctx, "Notifications", err)
	}
	msgs := sub.Channel()
	go func() {
		defer close(ch)
		defer sub.Close()
		for {
			select {
			case <-ctx.Done():
				return
			case <-b.done:
				return
			case _, ok := <-msgs:
				if !ok {
					return
				}
				select {
				case ch <- struct{}{}:
				default:
				}
			}
		}
	}()
	return ch, nil
}

// Cancel deletes a pending, claimed or parked entry. Only the ID is known,
// not the partition, so it runs cancel.lua on every partition in one
// pipeline (one round trip per node; a partition without the ID answers
// "not found" cheaply). It returns an error wrapping [outbox.ErrNotFound]
// when no partition has the entry.
//
// Cancelling a failing entry frees the later entries of its key at once
// (cancel.lua moves up to 1000 of those FindPendingBatch had set aside
// behind it back to due; any rest become due at its retry time).
func (b *Backend) Cancel(ctx context.Context, id string) error {
	if err := b.check(ctx); err != nil {
		return err
	}
	cmds, err := b.runEach(ctx, "Cancel", scriptCancel, func(k *keys) ([]string, []any) {
		return []string{k.entries, k.pending, k.parked, k.keyorder}, []any{id}
	})
	if err != nil {
		return err
	}
	for _, c := range cmds {
		if n, _ := c.Int64(); n > 0 {
			return nil
		}
	}
	return fmt.Errorf("redisoutbox: Cancel: no pending or parked entry has ID %q (never appended, already sent or cancelled): %w", id, outbox.ErrNotFound)
}

// Stats sums stats.lua over the partitions (one pipeline). Pending
// includes claimed entries; Due counts pending entries whose next attempt
// time has come (claimed ones included); OldestDue is the earliest next
// attempt time among them.
func (b *Backend) Stats(ctx context.Context) (outbox.Stats, error) {
	if err := b.check(ctx); err != nil {
		return outbox.Stats{}, err
	}
	cmds, err := b.runEach(ctx, "Stats", scriptStats, func(k *keys) ([]string, []any) {
		return []string{k.pending, k.parked}, nil
	})
	if err != nil {
		return outbox.Stats{}, err
	}
	var s outbox.Stats
	oldest := int64(-1)
	for _, c := range cmds {
		v, err := c.Int64Slice()
		if err != nil || len(v) != 4 {
			return outbox.Stats{}, fmt.Errorf("redisoutbox: Stats: unexpected script result %v (%v)", c.Val(), err)
		}
		s.Pending += v[0]
		s.Due += v[1]
		s.Parked += v[2]
		if v[3] >= 0 && (oldest < 0 || v[3] < oldest) {
			oldest = v[3]
		}
	}
	if oldest >= 0 {
		s.OldestDue = time.UnixMilli(oldest)
	}
	return s, nil
}

// Parked lists parked entries by ID (byte order) after the given ID, at
// most limit of them: parked.lua pages each partition (one pipeline) and
// the pages are merged. An entry that was parked because it was corrupt
// comes back with its LastError saying why and its raw stored value as
// Payload.
func (b *Backend) Parked(ctx context.Context, after string, limit int) ([]outbox.Entry, error) {
	if err := b.check(ctx); err != nil {
		return nil, err
	}
	if limit <= 0 {
		return nil, fmt.Errorf("redisoutbox: Parked limit is %d; it must be positive: %w", limit, outbox.ErrInvalidArgument)
	}
	cmds, err := b.runEach(ctx, "Parked", scriptParked, func(k *keys) ([]string, []any) {
		return []string{k.parked, k.entries}, []any{after, limit}
	})
	if err != nil {
		return nil, err
	}
	var out []outbox.Entry
	for p, c := range cmds {
		flat, err := c.Slice()
		if err != nil {
			return nil, b.wrap(ctx, "Parked", err)
		}
		for i := 0; i+1 < len(flat); i += 2 {
			id, _ := flat[i].(string)
			raw, _ := flat[i+1].(string)
			e, err := decodeEntry(id, p, []byte(raw))
			if err != nil {
				e.LastError = err.Error()
				e.Payload = []byte(raw)
			}
			out = append(out, e)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	if len(out) > limit {
		out = out[:limit]
	}
	return out, nil
}

// Requeue moves parked entries back to pending, due now, with Attempts
// reset to 0 and LastError kept: requeue.lua runs on every partition with
// all the IDs (one pipeline), since only the IDs are known. IDs that are
// not parked are ignored. It returns how many entries were requeued. A
// requeued entry gets a new append sequence, so it orders after the entries
// already due when it was requeued (requeued entries keep their order among
// themselves).
func (b *Backend) Requeue(ctx context.Context, ids ...string) (int, error) {
	if err := b.check(ctx); err != nil {
		return 0, err
	}
	if len(ids) == 0 {
		return 0, nil
	}
	args := make([]any, len(ids))
	for i, id := range ids {
		args[i] = id
	}
	cmds, err := b.runEach(ctx, "Requeue", scriptRequeue, func(k *keys) ([]string, []any) {
		return []string{k.entries, k.pending, k.parked, k.seq}, args
	})
	if err != nil {
		return 0, err
	}
	n := 0
	for _, c := range cmds {
		v, _ := c.Int64()
		n += int(v)
	}
	return n, nil
}
