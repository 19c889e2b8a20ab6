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
	res, err := scriptAcquire.Run(ctx, b.client, []string{k.lease, k.leasever, k.pending, k.inflight}, owner, ttlMillis(ttl)).Result()
	if err != nil {
		return outbox.Lease{}, b.wrap(ctx, "AcquireLease", err)
	}
	if code, ok := res.(int64); ok {
		return outbox.Lease{}, codeErr("AcquireLease", lease, code)
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
		return outbox.Lease{}, b.wrap(ctx, "RenewLease", err)
	}
	if exp < 0 {
		return outbox.Lease{}, codeErr("RenewLease", lease, exp)
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
	return b.wrap(ctx, "ReleaseLease", err)
}

// FindPendingBatch runs claim.lua (one round trip): it returns up to limit
// due entries of lease.Partition in (due time, append order), skipping
// entries held back by a failing entry of their key. The lease is the
// claim: the entries stay in pending, unchanged, until they are finished,
// and a new holder (or this one, fetching again without finishing) reads
// them again. Per-key order comes from the partition's
// key-order set, never from scores: an entry with a key is claimed only
// after every entry before it in its key's order was claimed and none of
// those was attempted (docs/redis.md, "Ordering and hold-back"). A corrupt stored entry is parked by the script
// with the reason as its LastError and is not returned. Errors wrap
// [outbox.ErrLeaseLost] or [outbox.ErrInvalidArgument] (the checks of
// [outbox.CheckFetch]: limit not positive, partition out of range).
func (b *Backend) FindPendingBatch(ctx context.Context, lease outbox.Lease, limit int) ([]outbox.Entry, error) {
	if err := b.check(ctx); err != nil {
		return nil, err
	}
	if err := outbox.CheckFetch(len(b.parts), lease, limit); err != nil {
		return nil, argErr("FindPendingBatch", err)
	}
	k := &b.parts[lease.Partition]
	budget := 2*limit + 256
	res, err := scriptClaim.Run(ctx, b.client,
		[]string{k.lease, k.pending, k.entries, k.keyorder, k.parked},
		token(lease), limit, budget).Result()
	if err != nil {
		return nil, b.wrap(ctx, "FindPendingBatch", err)
	}
	if code, ok := res.(int64); ok {
		return nil, codeErr("FindPendingBatch", lease, code)
	}
	flat, ok := res.([]any)
	if !ok || len(flat)%2 != 0 {
		return nil, fmt.Errorf("redisoutbox: FindPendingBatch: unexpected script result %T", res)
	}
	out := make([]outbox.Entry, 0, len(flat)/2)
	var corrupt []outbox.Failure
	for i := 0; i < len(flat); i += 2 {
		id, _ := flat[i].(string)
		raw, _ := flat[i+1].(string)
		e, err := decodeEntry(id, lease.Partition, []byte(raw))
		if err != nil {
			// The script validates the same structure, so this is a bug
			// or a format this build does not know: park, never stall.
			corrupt = append(corrupt, outbox.Failure{ID: id, Park: true, Error: err.Error()})
			continue
		}
		out = append(out, e)
	}
	if len(corrupt) > 0 {
		b.opts.Logger.Error("redisoutbox: parking entries that do not decode", "partition", lease.Partition, "count", len(corrupt), "first", corrupt[0].Error)
		if err := b.MarkFailed(ctx, lease, corrupt); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// fenced runs a lease-fenced script whose result is -1 (lease lost) or a
// count.
func (b *Backend) fenced(ctx context.Context, op string, s script, lease outbox.Lease, ks []string, args []any) error {
	n, err := s.Run(ctx, b.client, ks, args...).Int64()
	if err != nil {
		return b.wrap(ctx, op, err)
	}
	if n < 0 {
		return codeErr(op, lease, n)
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
	args := idArgs(lease, ids)
	return b.fenced(ctx, "MarkSent", scriptMarkSent, lease,
		[]string{k.lease, k.pending, k.entries, k.keyorder}, args)
}

// MarkFailed runs mark_failed.lua (one round trip, fenced by the lease).
// Errors longer than Options.MaxErrorLen are truncated. A retried entry is
// re-scored to the server's time (TIME, rounded up to the ms) plus Delay
// (rounded up to the ms; a negative Delay puts it in the past), never to
// before its position when it has a key, and holds back the later entries
// of its key; a parked one moves to the parked set. Entries that are not
// pending (claimed or not) are ignored. Empty failures: nil, no round trip.
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
		park, delay := "0", int64(0)
		if f.Park {
			park = "1"
		} else {
			delay = delayMillis(f.Delay)
		}
		args = append(args, f.ID, park, strconv.FormatInt(delay, 10), outbox.TruncateUTF8(f.Error, b.opts.MaxErrorLen))
	}
	return b.fenced(ctx, "MarkFailed", scriptMarkFailed, lease,
		[]string{k.lease, k.pending, k.entries, k.keyorder, k.parked}, args)
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
// or SCRIPT FLUSH), which changed nothing.
func (b *Backend) runEach(ctx context.Context, op string, s script, call func(k *keys) ([]string, []any)) ([]*redis.Cmd, error) {
	cmds := make([]*redis.Cmd, len(b.parts))
	_, err := b.client.Pipelined(ctx, func(pipe redis.Pipeliner) error {
		for p := range b.parts {
			ks, args := call(&b.parts[p])
			cmds[p] = pipe.EvalSha(ctx, s.Hash(), ks, args...)
		}
		return nil
	})
	if err != nil {
		retry := false
		for _, c := range cmds {
			if c.Err() != nil && !isNoScript(c.Err()) {
				return nil, b.wrap(ctx, op, c.Err())
			}
			retry = retry || isNoScript(c.Err())
		}
		if !retry {
			return nil, b.wrap(ctx, op, err)
		}
		_, err = b.client.Pipelined(ctx, func(pipe redis.Pipeliner) error {
			for p, c := range cmds {
				if isNoScript(c.Err()) {
					ks, args := call(&b.parts[p])
					cmds[p] = pipe.Eval(ctx, s.src, ks, args...)
				}
			}
			return nil
		})
		if err != nil {
			return nil, b.wrap(ctx, op, err)
		}
	}
	return cmds, nil
}
