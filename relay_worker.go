package outbox

import (
	"context"
	"errors"
	"sync/atomic"
	"time"
)

// worker relays one partition. Its goroutine owns lease, validUntil and
// slot; the coordinator talks to it only through want, try and the atomics.
type worker struct {
	r         *Relay
	partition int

	// try is signalled (buffer of one) by the coordinator after it set want:
	// acquire the lease now.
	try chan struct{}
	// wake is signalled (buffer of one) when entries may have been appended
	// to the partition.
	wake chan struct{}
	// want is set by the coordinator when this relay should hold the
	// partition; cleared by the coordinator to hand a held partition over
	// (the worker releases it after its batch in flight) and by the worker
	// when it stops holding or failed to acquire.
	want atomic.Bool
	// holding reports whether the worker holds the lease.
	holding atomic.Bool
	// starved is set when the last try found no free MaxPartitions slot
	// (without Membership): such workers are tried again as soon as a slot
	// is given back.
	starved atomic.Bool
	// tried is set when the coordinator asked for the partition since its
	// last timer pass (with Membership).
	tried atomic.Bool

	lease      Lease
	validUntil time.Time // local deadline of the lease: ask time + TTL
	slot       bool
	// streaks are this worker's runs of failed rounds, by topic, for the
	// topics' breakers.
	streaks map[string]*streak
}

func (w *worker) run(ctx, hardCtx context.Context) {
	r := w.r
	defer w.drop(hardCtx, true)
	// next is a batch claimed ahead (see prefetch), published in the next
	// pass once the lease is kept.
	var next *prefetched
	for ctx.Err() == nil {
		if next != nil && (!w.holding.Load() || !w.want.Load()) {
			next = nil // the lease ends: its claims come back by themselves
		}
		if !w.holding.Load() {
			if !w.want.Load() {
				// Idle until the coordinator asks: a partition this relay
				// does not hold costs no store call, whatever is appended.
				select {
				case <-w.try:
				case <-ctx.Done():
					return
				}
				continue
			}
			w.acquire(hardCtx)
			continue
		}
		if !w.want.Load() {
			// Handed over by the coordinator: the batch in flight is
			// finished (marked or released), so give the lease up.
			w.drop(hardCtx, true)
			continue
		}
		if !w.keep(hardCtx) {
			// Renewal failed but the lease may still be ours: pause
			// before asking again rather than hammering the store.
			if w.holding.Load() && !w.idle(ctx, max(r.opts.PollInterval/4, 10*time.Millisecond)) {
				return
			}
			continue
		}
		var (
			batch   []Entry
			corrupt int
			err     error
		)
		if next != nil {
			// Claimed while the batch before was published, which ended
			// clean (see afterBatch).
			batch, corrupt = next.batch, next.corrupt
			next = nil
		} else {
			// A wake-up that arrives while the fetch runs stays in the
			// channel, so the wait after an empty fetch returns at once.
			select {
			case <-w.wake:
			default:
			}
			batch, corrupt, err = w.fetch(hardCtx, w.lease, nil)
		}
		switch {
		case errors.Is(err, ErrLeaseLost):
			w.lost(err)
			continue
		case err != nil:
			if hardCtx.Err() != nil {
				return
			}
			r.log.Warn("outbox relay: fetching a batch failed", "partition", w.partition, "err", err)
			w.idle(ctx, min(r.opts.PollInterval, w.renewIn()))
			continue
		case len(batch) == 0 && corrupt == 0:
			w.idle(ctx, min(r.opts.PollInterval, w.renewIn()))
			continue
		}
		full := len(batch)+corrupt >= r.opts.BatchSize
		if len(batch) > 0 {
			r.batches.Add(1)
			pf := w.prefetch(hardCtx, batch, full)
			blocked, clean := w.process(hardCtx, batch)
			next = w.afterBatch(hardCtx, pf, clean)
			if next != nil {
				if len(next.batch) == 0 && next.corrupt == 0 {
					// The fetch ahead found nothing more due: wait as
					// after a short batch.
					next = nil
					w.idle(ctx, min(r.opts.PollInterval, w.renewIn()))
				}
				continue
			}
			if blocked > 0 {
				// Nothing was published: every entry's topic has its
				// breaker open (or is held back behind one). Wait for
				// the first breaker to let a probe through rather than
				// fetch the same entries again at once.
				w.idle(ctx, min(blocked, w.renewIn()))
				continue
			}
		}
		if !full {
			// The store had nothing more that was due: wait for a
			// wake-up (one that arrived meanwhile returns at once) or
			// the poll, instead of an empty fetch per batch.
			w.idle(ctx, min(r.opts.PollInterval, w.renewIn()))
		}
	}
}

// prefetched is a batch claimed by [Prefetcher.FetchNext] while the batch
// before it was published.
type prefetched struct {
	done    chan struct{} // closed when the fetch returned
	lease   Lease         // the lease it was claimed under
	woke    bool          // it took a wake-up from the channel
	batch   []Entry
	corrupt int
	err     error
}

// prefetch starts claiming the batch behind batch, the one about to be
// published, when the store is a [Prefetcher] and batch was full (full),
// so more is likely due. Not behind a short batch: the batch fetched
// ahead waits for the MarkSent of the one before it, so an entry
// committed while that one is published would wait for one more
// MarkSent than when fetched after it (Postgres's MarkSent, a commit,
// takes longer than its fetch). A wake-up that arrived before the fetch
// ahead starts is taken, as before any fetch.
func (w *worker) prefetch(ctx context.Context, batch []Entry, full bool) *prefetched {
	if w.r.prefetcher == nil || !full {
		return nil
	}
	woke := false
	select {
	case <-w.wake:
		woke = true
	default:
	}
	p := &prefetched{done: make(chan struct{}), lease: w.lease, woke: woke}
	go func() {
		defer close(p.done)
		p.batch, p.corrupt, p.err = w.fetch(ctx, p.lease, batch)
	}()
	return p
}

// afterBatch waits for the prefetch p (nil when none was started) and
// returns it (perhaps without entries) when its entries may be published next: the batch before it
// ended clean (every entry recorded as sent or parked) and the worker
// still holds the lease it was claimed under and is not handing the
// partition over. Otherwise it gives the entries back unattempted and
// returns nil, and puts back a wake-up the prefetch took: the worker goes
// on as if it had not prefetched.
func (w *worker) afterBatch(ctx context.Context, p *prefetched, clean bool) *prefetched {
	if p == nil {
		return nil
	}
	<-p.done
	sameLease := p.lease.Owner == w.lease.Owner && p.lease.Version == w.lease.Version
	if p.err == nil && clean && sameLease && w.holding.Load() && w.want.Load() {
		return p // perhaps empty: then nothing more was due
	}
	if p.err != nil && !errors.Is(p.err, ErrLeaseLost) && ctx.Err() == nil {
		w.r.log.Debug("outbox relay: fetching the next batch ahead failed; fetching it again", "partition", w.partition, "err", p.err)
	}
	if sameLease && len(p.batch) > 0 && ctx.Err() == nil {
		// (Stopping hard, the lease's release or expiry returns them.)
		w.release(ctx, idsOf(p.batch))
	}
	if p.woke {
		w.wakeUp()
	}
	return nil
}

// fetch claims the next batch under lease; with inFlight (the batch being
// published) through [Prefetcher.FetchNext]. From a [BatchFetcher] it also learns the
// entries the store parked because they do not decode: each is logged
// (the first maxCorruptLogs of a fetch one by one, the rest in one line)
// and counted like a park of the relay's own; it reports how many there
// were.
func (w *worker) fetch(ctx context.Context, lease Lease, inFlight []Entry) ([]Entry, int, error) {
	r := w.r
	var b Batch
	var err error
	switch {
	case inFlight != nil:
		b, err = r.prefetcher.FetchNext(ctx, lease, r.opts.BatchSize, inFlight)
	case r.fetcher != nil:
		b, err = r.fetcher.FetchBatch(ctx, lease, r.opts.BatchSize)
	default:
		b.Entries, err = r.store.FindPendingBatch(ctx, lease, r.opts.BatchSize)
	}
	if err != nil {
		return nil, 0, err
	}
	for i, c := range b.Parked {
		r.parked.Add(1)
		r.metrics.outcome(ctx, w.partition, "parked", 1)
		if i < maxCorruptLogs {
			r.log.Warn("outbox relay: the store parked an entry whose stored data does not decode; inspect it (outbox show ID), then fix it and requeue it, or cancel it",
				"partition", w.partition, "id", c.ID, "topic", c.Topic, "key", c.Key, "reason", c.Reason)
		}
	}
	if n := len(b.Parked); n > maxCorruptLogs {
		r.log.Warn("outbox relay: the store parked more entries whose stored data does not decode (outbox parked lists them)",
			"partition", w.partition, "more", n-maxCorruptLogs)
	}
	return b.Entries, len(b.Parked), nil
}

// maxCorruptLogs is how many parks of undecodable entries one fetch logs
// one by one.
const maxCorruptLogs = 20

// wakeUp tells the worker that entries may have been appended. It never
// blocks.
func (w *worker) wakeUp() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// idle waits d, a wake-up or the end of ctx; it reports whether ctx is live.
func (w *worker) idle(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-w.wake:
	case <-ctx.Done():
		return false
	}
	return true
}
