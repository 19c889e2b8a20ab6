package outbox

import (
	"context"
	"errors"
	"time"
)

// acquire tries to lease the partition; it reports success. Without
// Membership and with MaxPartitions, it first takes a slot, and reports
// false without asking the store when none is free.
func (w *worker) acquire(ctx context.Context) bool {
	cfg := w.cfg
	if cfg.slots != nil && !w.slot {
		select {
		case cfg.slots <- struct{}{}:
			w.slot = true
		default:
			w.starved.Store(true)
			w.want.Store(false)
			return false
		}
	}
	w.starved.Store(false)
	asked := cfg.now()
	began := asked
	l, err := cfg.store.AcquireLease(ctx, w.partition, cfg.owner, cfg.leaseTTL)
	if err == nil {
		// The store extends, at the same version, a lease this owner
		// already holds: one this worker abandoned after a failed write,
		// or one a previous run with the same Owner left behind. Entries
		// still claimed under that version would stay claimed, so start
		// over: a release returns them, and the acquire after it gets a
		// new version. It costs two round trips per acquisition.
		if err = cfg.store.ReleaseLease(ctx, l); err == nil {
			asked = cfg.now()
			l, err = cfg.store.AcquireLease(ctx, w.partition, cfg.owner, cfg.leaseTTL)
		}
	}
	if err != nil {
		held := errors.Is(err, ErrLeaseHeld)
		if held {
			cfg.stores.ok(opAcquire, w.partition)
		} else {
			cfg.stores.failed(ctx, opAcquire, w.partition, began, err)
		}
		w.want.Store(false)
		w.freeSlot()
		cfg.coord.attempted(held)
		return false
	}
	cfg.stores.ok(opAcquire, w.partition)
	w.lease, w.validUntil = l, asked.Add(cfg.leaseTTL)
	w.trustUntil.Store(w.validUntil.Add(-cfg.landing).UnixNano())
	w.holding.Store(true)
	cfg.counts.held.Add(1)
	cfg.metrics.leaseAcquired(w.partition)
	cfg.log.Debug("outbox relay: lease acquired", "partition", w.partition, "version", l.Version)
	cfg.coord.poke()
	return true
}

// margin is how much of the lease must be left for the worker to go on
// without renewing: RenewMargin, plus the sink's landing bound (the relay
// stops trusting the lease that long before its deadline).
func (w *worker) margin() time.Duration {
	return w.cfg.renewMargin + w.cfg.landing
}

// renewIn is how long until the held lease needs renewal (PollInterval when
// none is held).
func (w *worker) renewIn() time.Duration {
	if !w.holding.Load() {
		return w.cfg.pollInterval
	}
	return max(w.validUntil.Sub(w.cfg.now())-w.margin(), time.Millisecond)
}

// trustLeft is how long the worker may still act on its lease without
// renewing it: until its local deadline less the sink's landing bound.
func (w *worker) trustLeft() time.Duration {
	return w.validUntil.Sub(w.cfg.now()) - w.cfg.landing
}

// holdsTrusted reports whether the worker holds its partition's lease
// with trust left (see trustLeft). Unlike trustLeft it is safe to call from
// any goroutine: the relay's janitor asks it of partition 0's worker.
func (w *worker) holdsTrusted() bool {
	return w.holding.Load() && w.cfg.now().UnixNano() < w.trustUntil.Load()
}

// renew renews the lease (compare-and-renew) and moves the local deadline.
// A failure other than ErrLeaseLost goes to the store failures' summary.
func (w *worker) renew(ctx context.Context) error {
	cfg := w.cfg
	asked := cfg.now()
	l, err := cfg.store.RenewLease(ctx, w.lease, cfg.leaseTTL)
	switch {
	case err == nil:
		w.lease, w.validUntil = l, asked.Add(cfg.leaseTTL)
		w.trustUntil.Store(w.validUntil.Add(-cfg.landing).UnixNano())
		cfg.stores.ok(opRenew, w.partition)
	case errors.Is(err, ErrLeaseLost):
		cfg.stores.ok(opRenew, w.partition) // the store answered
	default:
		cfg.stores.failed(ctx, opRenew, w.partition, asked, err)
	}
	return err
}

// keep renews the lease when less than the margin is left; it reports
// whether the lease is still held with more than the margin left.
func (w *worker) keep(ctx context.Context) bool {
	cfg := w.cfg
	if !w.holding.Load() {
		return false
	}
	if w.validUntil.Sub(cfg.now()) >= w.margin() {
		return true
	}
	switch err := w.renew(ctx); {
	case err == nil:
		return true
	case errors.Is(err, ErrLeaseLost):
		w.lost(err)
		return false
	default: // summarised by renew
		if w.trustLeft() <= 0 {
			// Expired locally: whatever the store thinks, stop acting on it.
			w.drop(ctx, false)
		}
		return false
	}
}

// lost forgets a lease the store says is gone.
func (w *worker) lost(err error) {
	w.cfg.counts.leaseLosses.Add(1)
	w.cfg.metrics.leaseLost(w.partition)
	w.cfg.log.Warn("outbox relay: lease lost", "partition", w.partition, "version", w.lease.Version, "err", err)
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
		// The release gets releaseTimeout, and finalCallTimeout from the
		// hard stop on (at once when it has come): tried briefly all the
		// same, expiry being the fallback, and never past Stop's bound.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
		cut := context.AfterFunc(ctx, func() { time.AfterFunc(finalCallTimeout, cancel) })
		began := w.cfg.now()
		if err := w.cfg.store.ReleaseLease(rctx, w.lease); err == nil || errors.Is(err, ErrLeaseLost) {
			w.cfg.stores.ok(opReleaseLease, w.partition)
		} else {
			// Cut short by the hard stop (ctx ended): not a failure.
			w.cfg.stores.failed(ctx, opReleaseLease, w.partition, began, err)
		}
		cut()
		cancel()
	}
	w.holding.Store(false)
	w.want.Store(false)
	w.cfg.counts.held.Add(-1)
	w.freeSlot()
	w.cfg.coord.poke()
}

func (w *worker) freeSlot() {
	if w.slot {
		<-w.cfg.slots
		w.slot = false
		w.cfg.coord.poke()
	}
}
