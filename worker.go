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
	for ctx.Err() == nil {
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
		// A wake-up that arrives while the fetch runs stays in the
		// channel, so the wait after an empty fetch returns at once.
		select {
		case <-w.wake:
		default:
		}
		batch, corrupt, err := w.fetch(hardCtx)
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
		if len(batch) > 0 {
			r.batches.Add(1)
			if blocked := w.process(hardCtx, batch); blocked > 0 {
				// Nothing was published: every entry's topic has its
				// breaker open (or is held back behind one). Wait for
				// the first breaker to let a probe through rather than
				// fetch the same entries again at once.
				w.idle(ctx, min(blocked, w.renewIn()))
				continue
			}
		}
		if len(batch)+corrupt < r.opts.BatchSize {
			// The store had nothing more that was due: wait for a
			// wake-up (one that arrived meanwhile returns at once) or
			// the poll, instead of an empty fetch per batch.
			w.idle(ctx, min(r.opts.PollInterval, w.renewIn()))
		}
	}
}

// fetch claims the next batch. From a [BatchFetcher] it also learns the
// entries the store parked because they do not decode: each is logged
// (the first maxCorruptLogs of a fetch one by one, the rest in one line)
// and counted like a park of the relay's own; it reports how many there
// were.
func (w *worker) fetch(ctx context.Context) ([]Entry, int, error) {
	r := w.r
	bf := r.fetcher
	if bf == nil {
		batch, err := r.store.FindPendingBatch(ctx, w.lease, r.opts.BatchSize)
		return batch, 0, err
	}
	b, err := bf.FetchBatch(ctx, w.lease, r.opts.BatchSize)
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
