package conformance_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/outboxrelay/outbox"
)

// leaseVariants break AcquireLease, RenewLease and ReleaseLease.
var leaseVariants = []variant{
	{"double-claim", "AcquireLease never reports ErrLeaseHeld: a second owner gets a fake lease that maps to the holder's", []string{"Lease/ExclusiveAcrossOwners", "Claims/NotHandedToAnotherOwnerWhileLeaseLive"}},
	{"release-lease-unfenced", "ReleaseLease frees the partition whoever holds it", []string{"Lease/ReleaseByOtherOwnerOrVersionIsNoop", "Fencing/StaleReleaseLease", "Lease/ExpiryAllowsTakeoverWithHigherVersion"}},
	{"stale-renew-succeeds", "RenewLease of a lost lease reports success", []string{"Fencing/StaleRenewLease", "Lease/RenewAfterExpiryFails", "Fencing/ReleasedLeaseIsFenced", "Fencing/ForgedLeaseIsFenced", "Lease/ExpiryAllowsTakeoverWithHigherVersion"}},
	{"renew-nonpositive-drops-lease", "RenewLease with ttl <= 0 releases the lease before reporting ErrInvalidArgument", []string{"Arguments/RenewLeaseRejectsNonPositiveTTL"}},
	{"acquire-ttl-doubled", "AcquireLease grants the lease for twice the ttl", []string{"Lease/ExpiresNotMuchAfterTTL"}},
	{"renew-ttl-doubled", "RenewLease extends the lease by twice the ttl", []string{"Lease/ExpiresNotMuchAfterTTL"}},
	{"reacquire-does-not-extend", "AcquireLease by the holder returns its lease as it is, without extending it by ttl", []string{"Lease/ReacquireExtendsLikeRenew"}},
	{"release-lease-not-held-errors", "ReleaseLease of a lease that is not held (released, expired or taken over) returns ErrLeaseLost instead of nil", []string{"Lease/ReleaseOfALeaseNotHeldIsNoop", "Lease/ExpiryAllowsTakeoverWithHigherVersion"}},
	{"versions-restart-after-release", "a lease granted after a release gets the version of the released lease again (a counter kept with the lease row, deleted by the release)", []string{"Lease/VersionsIncreaseAcrossReleases", "Claims/ComeBackInOrderAfterLeaseRelease"}},
	{"reacquire-new-version", "AcquireLease by the holder itself grants a new lease with a new version, fencing out the old one", []string{"Lease/SameOwnerReacquireKeepsVersion"}},
	{"renew-keeps-expiry", "RenewLease checks the lease but does not extend it", []string{"Lease/RenewExtends", "Lease/ExpiresNotMuchAfterTTL"}},
	{"acquire-arguments-unchecked", "AcquireLease repairs bad arguments (an empty owner, ttl <= 0, a partition out of range) instead of refusing them", []string{"Arguments/AcquireLeaseRejectsBadArguments"}},
	{"release-lease-frees-all", "ReleaseLease frees every partition, not only the lease's", []string{"Lease/PartitionsAreIndependent"}},
}

// real maps a fake lease (double-claim) to the holder's lease.
func (w *broken) real(l outbox.Lease) outbox.Lease {
	if w.variant == "versions-restart-after-release" {
		w.mu.Lock()
		defer w.mu.Unlock()
		if r, ok := w.alias[outbox.Lease{Partition: l.Partition, Owner: l.Owner, Version: l.Version}]; ok {
			r.Expires = l.Expires
			return r
		}
		return l
	}
	if w.variant != "double-claim" {
		return l
	}
	w.mu.Lock()
	fake := w.fakes[fmt.Sprintf("%d/%s", l.Partition, l.Owner)]
	w.mu.Unlock()
	if fake {
		return w.current(l)
	}
	return l
}

func (w *broken) AcquireLease(ctx context.Context, partition int, owner string, ttl time.Duration) (outbox.Lease, error) {
	if w.variant == "acquire-ttl-doubled" && ttl > 0 {
		ttl *= 2
	}
	if w.variant == "acquire-arguments-unchecked" {
		if owner == "" {
			owner = "anonymous"
		}
		if ttl <= 0 {
			ttl = time.Minute
		}
		partition = min(max(partition, 0), w.Partitions()-1)
	}
	if w.variant == "reacquire-new-version" && ttl > 0 {
		w.mu.Lock()
		n, ok := w.newest[partition]
		w.mu.Unlock()
		if ok && n.Owner == owner && time.Now().Before(n.Expires) {
			_ = w.Backend.ReleaseLease(ctx, n)
		}
	}
	if w.variant == "reacquire-does-not-extend" && ttl > 0 {
		w.mu.Lock()
		n, ok := w.newest[partition]
		w.mu.Unlock()
		if ok && n.Owner == owner && time.Now().Before(n.Expires) {
			return n, nil
		}
	}
	l, err := w.Backend.AcquireLease(w.ctx(ctx), partition, owner, ttl)
	w.mu.Lock()
	defer w.mu.Unlock()
	if err == nil {
		if n, ok := w.newest[partition]; !ok || l.Version >= n.Version {
			w.newest[partition] = l
		}
		delete(w.fakes, fmt.Sprintf("%d/%s", partition, owner))
		w.shown[partition] = l
	}
	if w.variant == "versions-restart-after-release" && err == nil {
		if shown := l.Version - w.releases[partition]; shown != l.Version {
			w.alias[outbox.Lease{Partition: partition, Owner: owner, Version: shown}] = outbox.Lease{Partition: l.Partition, Owner: l.Owner, Version: l.Version}
			l.Version = shown
		}
	}
	if w.variant == "double-claim" && errors.Is(err, outbox.ErrLeaseHeld) {
		n := w.newest[partition]
		w.fakes[fmt.Sprintf("%d/%s", partition, owner)] = true
		return outbox.Lease{Partition: partition, Owner: owner, Version: n.Version, Expires: n.Expires}, nil
	}
	return l, err
}

func (w *broken) RenewLease(ctx context.Context, lease outbox.Lease, ttl time.Duration) (outbox.Lease, error) {
	if w.variant == "renew-nonpositive-drops-lease" && ttl <= 0 {
		_ = w.Backend.ReleaseLease(ctx, lease)
	}
	if w.variant == "renew-ttl-doubled" && ttl > 0 {
		ttl *= 2
	}
	if w.variant == "renew-keeps-expiry" && ttl > 0 {
		n := w.current(lease)
		if n.Owner != lease.Owner || n.Version != lease.Version || !time.Now().Before(n.Expires) {
			return outbox.Lease{}, fmt.Errorf("broken: RenewLease: %w", outbox.ErrLeaseLost)
		}
		return lease, nil
	}
	l, err := w.Backend.RenewLease(w.ctx(ctx), w.byOwner(w.real(lease), "renew-release-by-owner"), ttl)
	if err == nil {
		w.mu.Lock()
		if n := w.newest[l.Partition]; n.Version == l.Version {
			w.newest[l.Partition] = l
		}
		if n := w.shown[l.Partition]; n.Version == l.Version {
			w.shown[l.Partition] = l
		}
		w.mu.Unlock()
		l.Owner = lease.Owner
	}
	if w.variant == "stale-renew-succeeds" && errors.Is(err, outbox.ErrLeaseLost) {
		lease.Expires = time.Now().Add(ttl)
		return lease, nil
	}
	return l, err
}

func (w *broken) ReleaseLease(ctx context.Context, lease outbox.Lease) error {
	if w.variant == "release-lease-unfenced" {
		lease = w.current(lease)
	}
	lease = w.byOwner(lease, "renew-release-by-owner")
	if w.variant == "release-lease-not-held-errors" {
		w.mu.Lock()
		n := w.newest[lease.Partition]
		held := n.Owner == lease.Owner && n.Version == lease.Version && time.Now().Before(n.Expires) &&
			!w.freed[outbox.Lease{Partition: n.Partition, Owner: n.Owner, Version: n.Version}]
		w.mu.Unlock()
		if !held {
			return fmt.Errorf("broken: ReleaseLease: %s is not held: %w", lease.Owner, outbox.ErrLeaseLost)
		}
	}
	err := w.Backend.ReleaseLease(w.ctx(ctx), w.real(lease))
	if err == nil && w.variant == "release-lease-frees-all" {
		for p := range w.Partitions() {
			if p != lease.Partition {
				_ = w.Backend.ReleaseLease(ctx, w.current(outbox.Lease{Partition: p}))
			}
		}
	}
	if err == nil {
		w.mu.Lock()
		if w.variant == "versions-restart-after-release" {
			r := w.realLocked(lease)
			key := outbox.Lease{Partition: r.Partition, Owner: r.Owner, Version: r.Version}
			if n := w.newest[r.Partition]; n.Version == r.Version && n.Owner == r.Owner && time.Now().Before(n.Expires) && !w.freed[key] {
				w.releases[r.Partition]++
				w.freed[key] = true
			}
		}
		if n := w.newest[lease.Partition]; n.Owner == lease.Owner && n.Version == lease.Version {
			w.freed[outbox.Lease{Partition: n.Partition, Owner: n.Owner, Version: n.Version}] = true
		}
		if n, ok := w.shown[lease.Partition]; ok && n.Owner == lease.Owner && n.Version == lease.Version {
			delete(w.shown, lease.Partition)
		}
		w.mu.Unlock()
	}
	return err
}

// realLocked is real for the versions-restart-after-release variant with
// w.mu held.
func (w *broken) realLocked(l outbox.Lease) outbox.Lease {
	if r, ok := w.alias[outbox.Lease{Partition: l.Partition, Owner: l.Owner, Version: l.Version}]; ok {
		return r
	}
	return l
}
