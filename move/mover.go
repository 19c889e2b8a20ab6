package move

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"sync"
	"time"

	"github.com/outboxrelay/outbox"
)

// mover is one Run's shared state.
type mover struct {
	src   source
	dst   destination
	opts  Options
	total int64
	parts int

	mu       sync.Mutex // guards the counters and Progress calls
	moved    int64
	skipped  int64
	byState  Counts
	partDone int
}

func (m *mover) fill(r *Result) {
	m.mu.Lock()
	defer m.mu.Unlock()
	r.Moved, r.Skipped, r.ByState = m.moved, m.skipped, m.byState
}

// report updates the counters and calls Progress.
func (m *mover) report(update func(), wait *LeaseWait) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if update != nil {
		update()
	}
	if m.opts.Progress != nil {
		m.opts.Progress(Progress{Moved: m.moved, Skipped: m.skipped, Total: m.total,
			PartitionsDone: m.partDone, Partitions: m.parts, Waiting: wait})
	}
}

// runPass moves every source partition, Workers at a time.
func (m *mover) runPass(ctx context.Context) error {
	m.mu.Lock()
	m.partDone = 0
	m.mu.Unlock()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	todo := make(chan int, m.parts)
	for p := range m.parts {
		todo <- p
	}
	close(todo)
	var (
		wg       sync.WaitGroup
		errOnce  sync.Once
		firstErr error
	)
	for range min(m.opts.Workers, m.parts) {
		wg.Go(func() {
			for p := range todo {
				if err := m.partition(ctx, p); err != nil {
					errOnce.Do(func() { firstErr = err; cancel() })
					return
				}
			}
		})
	}
	wg.Wait()
	return firstErr
}

// partition moves one source partition until it is empty.
func (m *mover) partition(ctx context.Context, p int) error {
	l, deadline, err := m.acquire(ctx, p)
	if err != nil {
		return err
	}
	defer func() {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = m.src.ReleaseLease(rctx, l)
	}()
	for {
		if time.Until(deadline) < m.opts.LeaseTTL/2 {
			if l, deadline, err = m.keep(ctx, l); err != nil {
				return err
			}
		}
		batch, err := m.src.ExportBatch(ctx, l, m.opts.Batch)
		if errors.Is(err, outbox.ErrLeaseLost) {
			if l, deadline, err = m.acquire(ctx, p); err != nil {
				return err
			}
			continue
		}
		if err != nil {
			return fmt.Errorf("move: exporting from source partition %d: %w", p, err)
		}
		if len(batch) == 0 {
			m.report(func() { m.partDone++ }, nil)
			m.opts.Logger.DebugContext(ctx, "move: source partition empty", "partition", p)
			return nil
		}
		n, err := m.dst.Import(ctx, batch)
		if err != nil {
			return fmt.Errorf("move: importing %d entries of source partition %d into the destination (nothing of them was removed from the source): %w", len(batch), p, err)
		}
		if n < len(batch) {
			if err := m.checkSkipped(ctx, p, batch); err != nil {
				return err
			}
		}
		now := time.Now()
		m.report(func() {
			m.moved += int64(n)
			m.skipped += int64(len(batch) - n)
			for _, e := range batch {
				switch {
				case e.Parked:
					m.byState.Parked++
				case e.DueAt.After(now):
					m.byState.Waiting++
				default:
					m.byState.Due++
				}
			}
		}, nil)
		ids := make([]string, len(batch))
		for i, e := range batch {
			ids[i] = e.ID
		}
		if hook := m.opts.afterImport; hook != nil {
			if err := hook(p, ids); err != nil {
				return err
			}
		}
		if time.Until(deadline) < m.opts.LeaseTTL/2 {
			if l, deadline, err = m.keep(ctx, l); err != nil {
				return err
			}
		}
		err = m.src.RemoveExported(ctx, l, ids)
		if errors.Is(err, outbox.ErrLeaseLost) {
			// The batch is in both outboxes: the next export returns it
			// again and Import skips it.
			if l, deadline, err = m.acquire(ctx, p); err != nil {
				return err
			}
		} else if err != nil {
			return fmt.Errorf("move: removing %d moved entries from source partition %d (they are in the destination; a new run skips them): %w", len(ids), p, err)
		}
	}
}

// checkSkipped looks up, in the destination, the entries of a batch that
// Import did not all add, and fails on one whose content differs.
func (m *mover) checkSkipped(ctx context.Context, p int, batch []outbox.EntryInfo) error {
	for i, e := range batch {
		got, err := m.dst.Lookup(ctx, e.ID)
		if errors.Is(err, outbox.ErrNotFound) {
			continue // not there: Import cannot have skipped it
		}
		if err != nil {
			return fmt.Errorf("move: looking up entry %q in the destination: %w", e.ID, err)
		}
		if field := differs(e.Entry, got.Entry); field != "" {
			m.withdrawAfter(ctx, batch, i)
			return &ConflictError{ID: e.ID, Partition: p, Field: field}
		}
	}
	return nil
}

// withdrawAfter cancels, in the destination, the entries of the batch
// after batch[i] that have its key: Import put them there ahead of
// batch[i], which the conflict keeps out. They are all still in the
// source (a batch is removed only once it is imported whole), so the run
// after the conflict is resolved imports the key's entries in their
// order, whichever copy of the conflicting entry was cancelled. A
// destination that cannot cancel keeps them; see the package doc.
func (m *mover) withdrawAfter(ctx context.Context, batch []outbox.EntryInfo, i int) {
	c, ok := m.dst.(outbox.Canceler)
	key := batch[i].Key
	if !ok || key == "" {
		return
	}
	for _, e := range batch[i+1:] {
		if e.Key != key {
			continue
		}
		if err := c.Cancel(ctx, e.ID); err != nil && !errors.Is(err, outbox.ErrNotFound) {
			m.opts.Logger.WarnContext(ctx, "move: withdrawing an entry imported after a conflict failed; cancel the source's copy of the conflicting entry to keep its key's order",
				"id", e.ID, "conflict", batch[i].ID, "err", err)
		}
	}
}

// differs names the first field of what an entry is made of that differs.
func differs(a, b outbox.Entry) string {
	switch {
	case a.Topic != b.Topic:
		return "topic"
	case a.Key != b.Key:
		return "key"
	case !bytes.Equal(a.Payload, b.Payload):
		return "payload"
	case !(len(a.Headers) == 0 && len(b.Headers) == 0) && !maps.Equal(a.Headers, b.Headers):
		return "headers"
	}
	return ""
}

// acquire takes partition p's lease, waiting while another owner holds it.
func (m *mover) acquire(ctx context.Context, p int) (outbox.Lease, time.Time, error) {
	for {
		asked := time.Now()
		l, err := m.src.AcquireLease(ctx, p, m.opts.Owner, m.opts.LeaseTTL)
		if err == nil {
			return l, asked.Add(m.opts.LeaseTTL), nil
		}
		if !errors.Is(err, outbox.ErrLeaseHeld) {
			return l, asked, fmt.Errorf("move: taking the lease of source partition %d: %w", p, err)
		}
		wait := &LeaseWait{Partition: p}
		if pin, ok := m.src.(outbox.PartitionInspector); ok {
			if ps, err := pin.PartitionStats(ctx); err == nil && p < len(ps) {
				wait.Owner, wait.Expires = ps[p].Lease.Owner, ps[p].Lease.Expires
			}
		}
		m.opts.Logger.WarnContext(ctx, "move: waiting for a source partition whose lease another owner holds (stop the source's relays)",
			"partition", p, "owner", wait.Owner, "expires", wait.Expires)
		m.report(nil, wait)
		t := time.NewTimer(m.opts.PollInterval)
		select {
		case <-ctx.Done():
			t.Stop()
			return l, asked, ctx.Err()
		case <-t.C:
		}
	}
}

// keep renews l, or takes the partition again when it was lost.
func (m *mover) keep(ctx context.Context, l outbox.Lease) (outbox.Lease, time.Time, error) {
	asked := time.Now()
	nl, err := m.src.RenewLease(ctx, l, m.opts.LeaseTTL)
	if err == nil {
		return nl, asked.Add(m.opts.LeaseTTL), nil
	}
	if errors.Is(err, outbox.ErrLeaseLost) {
		return m.acquire(ctx, l.Partition)
	}
	return l, asked, fmt.Errorf("move: renewing the lease of source partition %d: %w", l.Partition, err)
}
