package outbox

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// acquire tries to lease the partition; it reports success. Without
// Membership and with MaxPartitions, it first takes a slot, and reports
// false without asking the store when none is free.
func (w *worker) acquire(ctx context.Context) bool {
	r := w.r
	if r.slots != nil && !w.slot {
		select {
		case r.slots <- struct{}{}:
			w.slot = true
		default:
			w.starved.Store(true)
			w.want.Store(false)
			return false
		}
	}
	w.starved.Store(false)
	asked := r.opts.Now()
	l, err := r.store.AcquireLease(ctx, w.partition, r.opts.Owner, r.opts.LeaseTTL)
	if err == nil {
		// The store extends, at the same version, a lease this owner
		// already holds: one this worker abandoned after a failed write,
		// or one a previous run with the same Owner left behind. Entries
		// still claimed under that version would stay claimed, so start
		// over: a release returns them, and the acquire after it gets a
		// new version. It costs two round trips per acquisition.
		if err = r.store.ReleaseLease(ctx, l); err == nil {
			asked = r.opts.Now()
			l, err = r.store.AcquireLease(ctx, w.partition, r.opts.Owner, r.opts.LeaseTTL)
		}
	}
	if err != nil {
		held := errors.Is(err, ErrLeaseHeld)
		if !held && ctx.Err() == nil {
			r.log.Warn("outbox relay: acquiring a lease failed", "partition", w.partition, "err", err)
		}
		w.want.Store(false)
		w.freeSlot()
		r.coord.attempted(held)
		return false
	}
	w.lease, w.validUntil = l, asked.Add(r.opts.LeaseTTL)
	w.holding.Store(true)
	r.held.Add(1)
	r.metrics.leaseAcquired(w.partition)
	r.log.Debug("outbox relay: lease acquired", "partition", w.partition, "version", l.Version)
	r.coord.poke()
	return true
}

// margin is how much of the lease must be left for the worker to go on
// without renewing: RenewMargin, plus the sink's landing bound (the relay
// stops trusting the lease that long before its deadline).
func (w *worker) margin() time.Duration {
	return w.r.opts.RenewMargin + w.r.landing
}

// renewIn is how long until the held lease needs renewal (PollInterval when
// none is held).
func (w *worker) renewIn() time.Duration {
	if !w.holding.Load() {
		return w.r.opts.PollInterval
	}
	return max(w.validUntil.Sub(w.r.opts.Now())-w.margin(), time.Millisecond)
}

// trustLeft is how long the worker may still act on its lease without
// renewing it: until its local deadline less the sink's landing bound.
func (w *worker) trustLeft() time.Duration {
	return w.validUntil.Sub(w.r.opts.Now()) - w.r.landing
}

// renew renews the lease (compare-and-renew) and moves the local deadline.
func (w *worker) renew(ctx context.Context) error {
	r := w.r
	asked := r.opts.Now()
	l, err := r.store.RenewLease(ctx, w.lease, r.opts.LeaseTTL)
	if err == nil {
		w.lease, w.validUntil = l, asked.Add(r.opts.LeaseTTL)
	}
	return err
}

// keep renews the lease when less than the margin is left; it reports
// whether the lease is still held with more than the margin left.
func (w *worker) keep(ctx context.Context) bool {
	r := w.r
	if !w.holding.Load() {
		return false
	}
	if w.validUntil.Sub(r.opts.Now()) >= w.margin() {
		return true
	}
	switch err := w.renew(ctx); {
	case err == nil:
		return true
	case errors.Is(err, ErrLeaseLost):
		w.lost(err)
		return false
	default:
		if ctx.Err() == nil {
			r.log.Warn("outbox relay: renewing a lease failed", "partition", w.partition, "err", err)
		}
		if w.trustLeft() <= 0 {
			// Expired locally: whatever the store thinks, stop acting on it.
			w.drop(ctx, false)
		}
		return false
	}
}

// lost forgets a lease the store says is gone.
func (w *worker) lost(err error) {
	w.r.leaseLosses.Add(1)
	w.r.metrics.leaseLost(w.partition)
	w.r.log.Warn("outbox relay: lease lost", "partition", w.partition, "version", w.lease.Version, "err", err)
	w.drop(nil, false)
}

// drop forgets the held lease, releasing it in the store when release is
// set and ctx allows, and tells the coordinator.
func (w *worker) drop(ctx context.Context, release bool) {
	if !w.holding.Load() {
		w.freeSlot()
		return
	}
	if release && ctx != nil {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		if ctx.Err() != nil {
			// Hard stop: try briefly all the same; expiry is the fallback.
			cancel()
			rctx, cancel = context.WithTimeout(context.Background(), finalCallTimeout)
		}
		if err := w.r.store.ReleaseLease(rctx, w.lease); err != nil {
			w.r.log.Warn("outbox relay: releasing a lease failed; it will expire", "partition", w.partition, "err", err)
		}
		cancel()
	}
	w.holding.Store(false)
	w.want.Store(false)
	w.r.held.Add(-1)
	w.freeSlot()
	w.r.coord.poke()
}

func (w *worker) freeSlot() {
	if w.slot {
		<-w.r.slots
		w.slot = false
		w.r.coord.poke()
	}
}

// publishRound hands one round to the sink and waits for its results
// while keeping the lease: it renews the lease when it is due, also in the
// middle of a slow publish, and cancels the publish the moment the lease is
// reported lost, or when it could not be renewed and only the sink's
// landing bound is left of it. When ctx ends (a hard stop) the publish is
// cancelled too. A sink that has not returned sinkAbandonAfter after its
// cancellation is abandoned: its messages count as failed, with an error
// saying their fate is unknown.
func (w *worker) publishRound(ctx context.Context, round []Entry) []error {
	r := w.r
	pctx, cancel := context.WithCancel(ctx)
	defer cancel()
	result := make(chan []error, 1)
	go func() { result <- r.sink.Publish(pctx, round) }()

	renew := time.NewTimer(w.renewIn())
	defer renew.Stop()
	trust := time.NewTimer(max(w.trustLeft(), 0))
	defer trust.Stop()
	var abandon <-chan time.Time
	var why error
	cut := func(reason error) {
		cancel()
		if abandon == nil {
			why = reason
			abandon = time.After(sinkAbandonAfter)
		}
	}
	hard := ctx.Done()
	for {
		select {
		case errs := <-result:
			return errs
		case <-renew.C:
			if !w.holding.Load() {
				continue
			}
			switch err := w.renew(ctx); {
			case err == nil:
				renew.Reset(w.renewIn())
				trust.Reset(max(w.trustLeft(), 0))
			case errors.Is(err, ErrLeaseLost):
				w.lost(err)
				cut(err)
			default:
				if ctx.Err() == nil {
					r.log.Warn("outbox relay: renewing a lease during a publish failed", "partition", w.partition, "err", err)
				}
				renew.Reset(max(min(r.opts.PollInterval/4, w.trustLeft()/2), 10*time.Millisecond))
			}
		case <-trust.C:
			if w.holding.Load() && w.trustLeft() > 0 {
				trust.Reset(w.trustLeft()) // renewed meanwhile
				continue
			}
			cut(fmt.Errorf("the lease on partition %d could not be renewed in time: %w", w.partition, ErrLeaseLost))
		case <-hard:
			hard = nil
			cut(ctx.Err())
		case <-abandon:
			err := fmt.Errorf("outbox: the sink did not return %v after its publish was cancelled (%v); the fate of the message is unknown (it may still be written, as a duplicate)", sinkAbandonAfter, why)
			r.log.Error("outbox relay: abandoning a publish the sink did not finish after cancellation", "partition", w.partition, "messages", len(round), "reason", why)
			errs := make([]error, len(round))
			for i := range errs {
				errs[i] = err
			}
			return errs
		}
	}
}
