package memory

import (
	"context"
	"fmt"
	"time"

	"github.com/outboxrelay/outbox"
)

// live reports whether p's lease is held and unexpired at now.
func (p *partition) live(now time.Time) bool {
	return p.owner != "" && now.Before(p.expires)
}

// fence returns the partition of lease if lease is its live lease at now,
// else an error wrapping [outbox.ErrLeaseLost] (or
// [outbox.ErrInvalidArgument] for a partition out of range). b.mu must be
// held.
func (b *Backend) fence(lease outbox.Lease, now time.Time) (*partition, error) {
	p, err := b.partition(lease.Partition)
	if err != nil {
		return nil, err
	}
	if p.owner == "" || p.owner != lease.Owner || p.version != lease.Version || !p.live(now) {
		return nil, fmt.Errorf("memory: lease on partition %d is no longer held by %q at version %d (it expired, was taken over or was released); acquire the partition again: %w",
			lease.Partition, lease.Owner, lease.Version, outbox.ErrLeaseLost)
	}
	return p, nil
}

// AcquireLease grants owner the lease on partition for ttl, extends it if
// owner already holds it (keeping its Version), or returns an error
// wrapping [outbox.ErrLeaseHeld] if another owner holds an unexpired lease.
// A newly granted lease has the partition's version counter plus one, and
// the claims of every earlier lease go back to pending in their original
// order. An empty owner, a ttl that is not positive or a partition out of
// range gives an error wrapping [outbox.ErrInvalidArgument].
func (b *Backend) AcquireLease(ctx context.Context, partition int, owner string, ttl time.Duration) (outbox.Lease, error) {
	if err := b.lock(ctx); err != nil {
		return outbox.Lease{}, err
	}
	defer b.mu.Unlock()
	if err := outbox.CheckAcquire(len(b.parts), partition, owner, ttl); err != nil {
		return outbox.Lease{}, fmt.Errorf("memory: AcquireLease: %w", err)
	}
	p := b.parts[partition]
	now := b.clock()
	if p.live(now) {
		if p.owner != owner {
			return outbox.Lease{}, fmt.Errorf("memory: partition %d is leased by %q until %v; retry after it expires or is released: %w",
				partition, p.owner, p.expires, outbox.ErrLeaseHeld)
		}
		p.expires = now.Add(ttl)
		return outbox.Lease{Partition: partition, Owner: owner, Version: p.version, Expires: p.expires}, nil
	}
	p.returnClaims()
	p.version++
	p.owner = owner
	p.expires = now.Add(ttl)
	return outbox.Lease{Partition: partition, Owner: owner, Version: p.version, Expires: p.expires}, nil
}

// RenewLease extends lease by ttl from now if lease.Owner still holds it
// at lease.Version and it has not expired; otherwise it changes nothing and
// returns an error wrapping [outbox.ErrLeaseLost]. A ttl that is not
// positive gives an error wrapping [outbox.ErrInvalidArgument].
func (b *Backend) RenewLease(ctx context.Context, lease outbox.Lease, ttl time.Duration) (outbox.Lease, error) {
	if err := b.lock(ctx); err != nil {
		return outbox.Lease{}, err
	}
	defer b.mu.Unlock()
	if err := outbox.CheckRenew(len(b.parts), lease, ttl); err != nil {
		return outbox.Lease{}, fmt.Errorf("memory: RenewLease: %w", err)
	}
	now := b.clock()
	p, err := b.fence(lease, now)
	if err != nil {
		return outbox.Lease{}, err
	}
	p.expires = now.Add(ttl)
	lease.Expires = p.expires
	return lease, nil
}

// ReleaseLease frees the partition if lease.Owner holds its live lease at
// lease.Version, returning the lease's unfinished claims to pending. It is
// a no-op returning nil otherwise (expired, taken over or already
// released). A partition out of range gives an error wrapping
// [outbox.ErrInvalidArgument].
func (b *Backend) ReleaseLease(ctx context.Context, lease outbox.Lease) error {
	if err := b.lock(ctx); err != nil {
		return err
	}
	defer b.mu.Unlock()
	p, err := b.partition(lease.Partition)
	if err != nil {
		return err
	}
	if lease.Owner == "" || p.owner != lease.Owner || p.version != lease.Version || !p.live(b.clock()) {
		return nil
	}
	p.owner = ""
	p.expires = time.Time{}
	p.returnClaims()
	return nil
}

// returnClaims puts every claimed entry of p back into the heap, where it
// takes its original place (next attempt time and append order are kept).
func (p *partition) returnClaims() {
	for it := range p.claimed {
		delete(p.claimed, it)
		it.state = stateReady
		p.ready.push(it)
	}
}
