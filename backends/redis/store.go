package redisoutbox

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/outboxrelay/outbox"
)

// AcquireLease runs acquire.lua: SET NX PX with the owner token; the version
// comes from INCR of a per-partition counter that never expires, so it never
// goes backwards. The lease is the claim: a new holder reads the unfinished
// entries of the previous one first, in order. An owner that already holds
// the lease gets it extended at the same version. Errors wrap
// [outbox.ErrLeaseHeld] (another owner) or [outbox.ErrInvalidArgument] (the
// checks of [outbox.CheckAcquire]: empty owner, ttl not positive, partition
// out of range). One round trip.
func (b *Backend) AcquireLease(ctx context.Context, partition int, owner string, ttl time.Duration) (outbox.Lease, error) {
	if err := b.check(ctx); err != nil {
		return outbox.Lease{}, err
	}
	if err := outbox.CheckAcquire(len(b.parts), partition, owner, ttl); err != nil {
		return outbox.Lease{}, argErr("AcquireLease", err)
	}
	k := &b.parts[partition]
	lease := outbox.Lease{Partition: partition, Owner: owner}
	ks := []string{k.lease, k.leasever, k.pending, k.inflight}
	res, err := scriptAcquire.Run(ctx, b.client, ks, owner, ttlMillis(ttl)).Result()
	if err != nil {
		return outbox.Lease{}, b.mapErr(ctx, "AcquireLease", err, ks...)
	}
	if code, ok := res.(int64); ok {
		return outbox.Lease{}, b.mapErr(ctx, "AcquireLease", scriptCode{code, lease})
	}
	v, exp, err := twoInts(res)
	if err != nil {
		return outbox.Lease{}, fmt.Errorf("redisoutbox: AcquireLease: %w", err)
	}
	lease.Version, lease.Expires = v, time.UnixMilli(exp)
	return lease, nil
}

func twoInts(res any) (int64, int64, error) {
	a, ok := res.([]any)
	if !ok || len(a) != 2 {
		return 0, 0, fmt.Errorf("unexpected script result %v", res)
	}
	x, ok1 := a[0].(int64)
	y, ok2 := a[1].(int64)
	if !ok1 || !ok2 {
		return 0, 0, fmt.Errorf("unexpected script result %v", res)
	}
	return x, y, nil
}

// RenewLease runs renew.lua: PEXPIRE guarded by the token "version:owner"
// (compare-and-renew). A lease that expired, was taken over or was released
// gives an error wrapping [outbox.ErrLeaseLost]; arguments are checked
// with [outbox.CheckRenew] ([outbox.ErrInvalidArgument]). One round trip.
func (b *Backend) RenewLease(ctx context.Context, lease outbox.Lease, ttl time.Duration) (outbox.Lease, error) {
	if err := b.check(ctx); err != nil {
		return outbox.Lease{}, err
	}
	if err := outbox.CheckRenew(len(b.parts), lease, ttl); err != nil {
		return outbox.Lease{}, argErr("RenewLease", err)
	}
	k := &b.parts[lease.Partition]
	exp, err := scriptRenew.Run(ctx, b.client, []string{k.lease}, token(lease), ttlMillis(ttl)).Int64()
	if err != nil {
		return outbox.Lease{}, b.mapErr(ctx, "RenewLease", err, k.lease)
	}
	if exp < 0 {
		return outbox.Lease{}, b.mapErr(ctx, "RenewLease", scriptCode{exp, lease})
	}
	lease.Expires = time.UnixMilli(exp)
	return lease, nil
}

// ReleaseLease runs release.lua: DEL guarded by the token (compare-and-
// delete). The lease's unfinished entries never left pending, so the next
// holder reads them first. A lease no longer held is a no-op. One round
// trip.
func (b *Backend) ReleaseLease(ctx context.Context, lease outbox.Lease) error {
	if err := b.check(ctx); err != nil {
		return err
	}
	k, err := b.partition("ReleaseLease", lease.Partition)
	if err != nil {
		return err
	}
	if lease.Owner == "" {
		return nil
	}
	err = scriptRelease.Run(ctx, b.client, []string{k.lease}, token(lease)).Err()
	return b.mapErr(ctx, "ReleaseLease", err, k.lease)
}

// markArgs returns ARGV for mark_sent.lua: the token, the number k of the
// IDs the partition's last two fetches under lease returned, the pending
// members they returned those k under, the k IDs in the same order, then
// the other IDs. A member is only a hint: the script removes an entry only
// when that member is pending (see mark_sent.lua), so a stale one costs a
// read, never a wrong removal.
func (b *Backend) markArgs(lease outbox.Lease, ids []string) []any {
	var members, known, plain []any
	b.claims[lease.Partition].Each(lease, ids, func(id, member string, ok bool) {
		if ok {
			if members == nil {
				members, known = make([]any, 0, len(ids)), make([]any, 0, len(ids))
			}
			members, known = append(members, member), append(known, id)
		} else {
			plain = append(plain, id)
		}
	})
	args := make([]any, 0, 2+len(members)+len(known)+len(plain))
	args = append(args, token(lease), len(members))
	args = append(append(append(args, members...), known...), plain...)
	return args
}

// fenced runs a lease-fenced script whose result is -1 (lease lost) or a
// count.
func (b *Backend) fenced(ctx context.Context, op string, s script, lease outbox.Lease, ks []string, args []any) error {
	n, err := s.Run(ctx, b.client, ks, args...).Int64()
	if err != nil {
		return b.mapErr(ctx, op, err, ks...)
	}
	if n < 0 {
		return b.mapErr(ctx, op, scriptCode{n, lease})
	}
	return nil
}

// MarkSent runs mark_sent.lua (one round trip, fenced by the lease): the
// entries are deleted, and stop holding back their keys. Unknown, already
// sent and parked IDs are ignored. Empty ids: nil, no round trip.
func (b *Backend) MarkSent(ctx context.Context, lease outbox.Lease, ids []string) error {
	if err := b.check(ctx); err != nil {
		return err
	}
	if len(ids) == 0 {
		return nil
	}
	k, err := b.partition("MarkSent", lease.Partition)
	if err != nil {
		return err
	}
	ks := []string{k.lease, k.pending, k.entries, k.keyorder, k.parked, k.seq, k.history}
	front := &b.fronts[lease.Partition]
	if hint := front.markHint(lease, ids); hint != nil {
		// The batch is the front of pending: remove it by rank, with no
		// members sent (see mark_sent.lua).
		args := make([]any, 0, 5+len(ids))
		args = append(append(append(args, token(lease), "front"), hint...), anys(ids)...)
		n, err := scriptMarkSent.Run(ctx, b.client, ks, args...).Int64()
		if err != nil {
			return b.mapErr(ctx, "MarkSent", err, ks...)
		}
		if n != codeHintRefused {
			if n < 0 {
				return b.mapErr(ctx, "MarkSent", scriptCode{n, lease})
			}
			return nil
		}
		front.held(false)
	}
	return b.fenced(ctx, "MarkSent", scriptMarkSent, lease, ks, b.markArgs(lease, ids))
}

// anys returns ss as a []any.
func anys(ss []string) []any {
	out := make([]any, len(ss))
	for i, s := range ss {
		out[i] = s
	}
	return out
}

// MarkFailed runs mark_failed.lua (one round trip, fenced by the lease).
// Errors longer than Options.MaxErrorLen are truncated. A retried entry is
// re-scored to the server's time plus Delay (both rounded up to the ms
// for a positive Delay; for a Delay of 0 or less, the time rounded down,
// so it is due at once; a negative Delay puts it in the past), never to
// before its position when it has a key, and holds back the later entries
// of its key; a parked one moves to the parked set. Each retry or park is
// an attempt: it is appended, with the server's time and lease.Owner, to
// the entry's history (the partition's history hash), which keeps the
// last [outbox.MaxAttemptHistory]. A [outbox.Failure.Deferred] failure is
// re-scored as a retry is, without an attempt (its Error is not stored),
// and flags the entry deferred, so it holds back its key until it is
// sent, cancelled, parked or requeued. Entries that are not pending
// (claimed or not) are ignored. Empty failures: nil, no round trip. A
// failure with both Park and Deferred: an error wrapping
// [outbox.ErrInvalidArgument], nothing written.
func (b *Backend) MarkFailed(ctx context.Context, lease outbox.Lease, failures []outbox.Failure) error {
	if err := b.check(ctx); err != nil {
		return err
	}
	if len(failures) == 0 {
		return nil
	}
	k, err := b.partition("MarkFailed", lease.Partition)
	if err != nil {
		return err
	}
	args := make([]any, 0, 1+4*len(failures))
	args = append(args, token(lease))
	for _, f := range failures {
		mode, delay, msg := "0", int64(0), ""
		switch {
		case f.Park && f.Deferred:
			return fmt.Errorf("redisoutbox: MarkFailed: the failure of entry %q sets both Park and Deferred; a deferred entry was not attempted, so it cannot be parked: set one of them: %w", f.ID, outbox.ErrInvalidArgument)
		case f.Park:
			mode, msg = "1", outbox.TruncateUTF8(f.Error, b.opts.MaxErrorLen)
		case f.Deferred:
			mode, delay = "d", delayMillis(f.Delay)
		default:
			delay, msg = delayMillis(f.Delay), outbox.TruncateUTF8(f.Error, b.opts.MaxErrorLen)
		}
		args = append(args, f.ID, mode, strconv.FormatInt(delay, 10), msg)
	}
	return b.fenced(ctx, "MarkFailed", scriptMarkFailed, lease,
		[]string{k.lease, k.pending, k.entries, k.keyorder, k.parked, k.seq, k.history, k.parkedat}, args)
}

// idArgs is ARGV for the scripts that take the lease token then entry IDs.
func idArgs(lease outbox.Lease, ids []string) []any {
	args := make([]any, 0, 1+len(ids))
	args = append(args, token(lease))
	for _, id := range ids {
		args = append(args, id)
	}
	return args
}

// Release runs release_claims.lua (one round trip): it only checks that
// the lease still holds. The lease is the claim, so entries returned by
// FindPendingBatch never left pending and come back, unchanged and in
// order, with the next read of the partition. Empty ids: nil, no round
// trip.
func (b *Backend) Release(ctx context.Context, lease outbox.Lease, ids []string) error {
	if err := b.check(ctx); err != nil {
		return err
	}
	if len(ids) == 0 {
		return nil
	}
	k, err := b.partition("Release", lease.Partition)
	if err != nil {
		return err
	}
	return b.fenced(ctx, "Release", scriptReleaseClaims, lease, []string{k.lease}, []any{token(lease)})
}

// runEach runs s once per partition in one pipeline (one round trip per
// node), re-running with EVAL any call that met NOSCRIPT (after a restart
// or SCRIPT FLUSH), which changed nothing. When a call fails otherwise, it
// returns the commands with the error (the other partitions' calls ran),
// naming the key when Redis refused one (see fail).
func (b *Backend) runEach(ctx context.Context, op string, s script, call func(k *keys) ([]string, []any)) ([]*redis.Cmd, error) {
	return b.runOn(ctx, op, s, b.allParts(), func(p int) ([]string, []any) { return call(&b.parts[p]) })
}

// runOn is runEach on the partitions ps: the i-th command is partition
// ps[i]'s.
func (b *Backend) runOn(ctx context.Context, op string, s script, ps []int, call func(p int) ([]string, []any)) ([]*redis.Cmd, error) {
	cmds := make([]*redis.Cmd, len(ps))
	ks := make([][]string, len(ps))
	_, err := b.client.Pipelined(ctx, func(pipe redis.Pipeliner) error {
		for i, p := range ps {
			var args []any
			ks[i], args = call(p)
			cmds[i] = pipe.EvalSha(ctx, s.Hash(), ks[i], args...)
		}
		return nil
	})
	if err != nil {
		retry := false
		for i, c := range cmds {
			if c.Err() != nil && !isNoScript(c.Err()) {
				return cmds, b.mapErr(ctx, op, c.Err(), ks[i]...)
			}
			retry = retry || isNoScript(c.Err())
		}
		if !retry {
			return nil, b.mapErr(ctx, op, err)
		}
		_, err = b.client.Pipelined(ctx, func(pipe redis.Pipeliner) error {
			for i, c := range cmds {
				if isNoScript(c.Err()) {
					_, args := call(ps[i])
					cmds[i] = pipe.Eval(ctx, s.src, ks[i], args...)
				}
			}
			return nil
		})
		if err != nil {
			for i, c := range cmds {
				if c.Err() != nil {
					return nil, b.mapErr(ctx, op, c.Err(), ks[i]...)
				}
			}
			return nil, b.mapErr(ctx, op, err)
		}
	}
	return cmds, nil
}
