package mysqloutbox

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/outboxrelay/outbox"
)

// Leases live in the lease table, one row per partition (created free by
// Migrate, never deleted): an empty owner means free, version only grows.
// Every fenced write of the relay reads its partition's row with a shared
// lock; AcquireLease and RenewLease change it in a short transaction of
// their own that locks it exclusively, so a fenced write and a takeover
// never interleave.

// AcquireLease takes or extends the lease of partition. See
// [outbox.Store.AcquireLease]. Besides its checks, owner must be valid
// UTF-8 of at most 255 characters, else the error wraps
// [outbox.ErrInvalidArgument].
//
// It first reads the lease row without locking it (one round trip): a
// live lease of another owner is [outbox.ErrLeaseHeld] at once, so a
// standby relay polling a held partition never locks the row the
// holder's fenced writes read. Otherwise, in a short transaction, it
// locks the row with SELECT ... FOR UPDATE SKIP LOCKED (a row some
// other transaction has locked is in use: ErrLeaseHeld, at once, never a
// lock wait), checks it again and writes the new owner, version and
// expiry: four more round trips (START TRANSACTION, the locking read,
// the UPDATE, COMMIT). The holder extending its own lease locks the
// row waiting instead, behind its own fenced writes. Versions never go
// back: a free or expired lease is taken with its version plus one, and a
// lease row deleted by hand is recreated with the server's clock in
// microseconds as its version, above every version counted before (one
// per handover; unless the server's clock was set back past an earlier
// recreation).
func (b *Backend) AcquireLease(ctx context.Context, partition int, owner string, ttl time.Duration) (outbox.Lease, error) {
	const op = "AcquireLease"
	if err := b.checkOpen(op); err != nil {
		return outbox.Lease{}, err
	}
	if err := outbox.CheckAcquire(b.opts.Partitions, partition, owner, ttl); err != nil {
		return outbox.Lease{}, argErr(op, err)
	}
	if err := checkOwner(owner); err != nil {
		return outbox.Lease{}, argErr(op, err)
	}
	l, err := b.acquire(ctx, partition, owner, ttl)
	if errors.Is(err, errNoRow) {
		// The row is missing, or a concurrent acquire recreated it after
		// the read: once more, now that it exists.
		if l, err = b.recreateLease(ctx, partition, owner, ttl); errors.Is(err, errNoRow) {
			l, err = b.acquire(ctx, partition, owner, ttl)
		}
	}
	if errors.Is(err, errNoRow) || errors.Is(err, outbox.ErrLeaseHeld) {
		return outbox.Lease{}, fmt.Errorf("mysqloutbox: %s: partition %d: %w", op, partition, outbox.ErrLeaseHeld)
	}
	if err != nil {
		return outbox.Lease{}, b.interpretError(op, err)
	}
	return l, nil
}

// leaseRow is a lease row as the lease queries read it.
type leaseRow struct {
	owner   string
	version int64
	live    bool
	nowUS   int64 // the server's clock, by the locking reads
}

// acquire is AcquireLease on an existing row; errNoRow when the row does
// not exist, ErrLeaseHeld when another owner holds it or its row is
// locked.
func (b *Backend) acquire(ctx context.Context, partition int, owner string, ttl time.Duration) (outbox.Lease, error) {
	var r leaseRow
	err := b.core.stmts.leaseRead.QueryRowContext(ctx, partition).Scan(&r.owner, &r.version, &r.live)
	if errors.Is(err, sql.ErrNoRows) {
		return outbox.Lease{}, errNoRow
	}
	if err != nil {
		return outbox.Lease{}, err
	}
	if r.live && r.owner != owner {
		return outbox.Lease{}, outbox.ErrLeaseHeld
	}
	lock := b.core.stmts.leaseLockSkip
	if r.live { // owner's own lease: wait for its own fenced writes
		lock = b.core.stmts.leaseLock
	}
	return b.writeLease(ctx, lock, partition, owner, ttl, func(r leaseRow) (int64, error) {
		switch {
		case r.live && r.owner == owner:
			return r.version, nil
		case r.live:
			return 0, outbox.ErrLeaseHeld
		}
		return r.version + 1, nil
	})
}

// writeLease locks the lease row of partition with lock in a short
// transaction, asks decide for the version to grant (or an error), and
// writes owner, that version and an expiry ttl after the server's now.
// A row lock skips (SKIP LOCKED) reports ErrLeaseHeld.
func (b *Backend) writeLease(ctx context.Context, lock *sql.Stmt, partition int, owner string, ttl time.Duration,
	decide func(leaseRow) (int64, error)) (outbox.Lease, error) {
	tx, err := b.db.BeginTx(ctx, nil)
	if err != nil {
		return outbox.Lease{}, err
	}
	defer rollback(tx)
	var r leaseRow
	err = tx.StmtContext(ctx, lock).QueryRowContext(ctx, partition).Scan(&r.owner, &r.version, &r.live, &r.nowUS)
	if errors.Is(err, sql.ErrNoRows) {
		return outbox.Lease{}, outbox.ErrLeaseHeld // locked by another transaction (or deleted since)
	}
	if err != nil {
		return outbox.Lease{}, err
	}
	version, err := decide(r)
	if err != nil {
		return outbox.Lease{}, err
	}
	expires := r.nowUS + micros(ttl)
	if _, err := tx.StmtContext(ctx, b.core.stmts.leaseWrite).ExecContext(ctx, owner, version, expires, partition); err != nil {
		return outbox.Lease{}, err
	}
	if err := tx.Commit(); err != nil {
		return outbox.Lease{}, err
	}
	return outbox.Lease{Partition: partition, Owner: owner, Version: version, Expires: fromMicros(expires)}, nil
}

// recreateLease inserts the missing lease row of partition, held by
// owner, with the server's clock in microseconds as its version: above
// every version the deleted row can have counted to (one per handover).
// errNoRow when a concurrent acquire recreated it first.
func (b *Backend) recreateLease(ctx context.Context, partition int, owner string, ttl time.Duration) (outbox.Lease, error) {
	var nowUS int64
	if err := b.core.stmts.now.QueryRowContext(ctx).Scan(&nowUS); err != nil {
		return outbox.Lease{}, err
	}
	expires := nowUS + micros(ttl)
	_, err := b.core.stmts.leaseInsert.ExecContext(ctx, partition, owner, nowUS, expires)
	if isMySQLError(err, errDupEntry) {
		return outbox.Lease{}, errNoRow
	}
	if err != nil {
		return outbox.Lease{}, err
	}
	return outbox.Lease{Partition: partition, Owner: owner, Version: nowUS, Expires: fromMicros(expires)}, nil
}

// RenewLease extends a held, unexpired lease to ttl after the server's
// now (compare-and-renew): in a short transaction it locks the lease row
// (waiting for the holder's own fenced writes), checks owner, version and
// expiry, and writes the new expiry, four round trips. See
// [outbox.Store.RenewLease].
func (b *Backend) RenewLease(ctx context.Context, lease outbox.Lease, ttl time.Duration) (outbox.Lease, error) {
	const op = "RenewLease"
	if err := b.checkOpen(op); err != nil {
		return outbox.Lease{}, err
	}
	if err := outbox.CheckRenew(b.opts.Partitions, lease, ttl); err != nil {
		return outbox.Lease{}, argErr(op, err)
	}
	l, err := b.writeLease(ctx, b.core.stmts.leaseLock, lease.Partition, lease.Owner, ttl, func(r leaseRow) (int64, error) {
		if !r.live || r.owner != lease.Owner || r.version != lease.Version {
			return 0, outbox.ErrLeaseLost
		}
		return r.version, nil
	})
	if errors.Is(err, outbox.ErrLeaseLost) || errors.Is(err, outbox.ErrLeaseHeld) {
		return outbox.Lease{}, leaseLost(op, lease)
	}
	if err != nil {
		return outbox.Lease{}, b.interpretError(op, err)
	}
	return l, nil
}

// ReleaseLease frees the partition when lease still holds it
// (compare-and-free, one statement, one round trip). The lease row stays,
// marked free, so versions keep growing. See [outbox.Store.ReleaseLease].
func (b *Backend) ReleaseLease(ctx context.Context, lease outbox.Lease) error {
	const op = "ReleaseLease"
	if err := b.checkOpen(op); err != nil {
		return err
	}
	if err := outbox.CheckPartition(b.opts.Partitions, lease.Partition); err != nil {
		return argErr(op, err)
	}
	_, err := b.core.stmts.releaseLease.ExecContext(ctx, lease.Partition, lease.Owner, lease.Version)
	return b.interpretError(op, err)
}
