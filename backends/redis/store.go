package redisoutbox

import (
	"context"
	"fmt"
	"strconv"
	"sync"
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
		return outbox.Lease{}, b.fail(ctx, "AcquireLease", err, ks...)
	}
	if code, ok := res.(int64); ok && code == -3 {
		return outbox.Lease{}, fmt.Errorf("redisoutbox: AcquireLease: the lease key %q of partition %d holds a value that is not \"version:owner\": it was not written by redisoutbox; delete it (DEL %s) to free the partition",
			k.lease, partition, k.lease)
	} else if ok {
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
		return outbox.Lease{}, b.fail(ctx, "RenewLease", err, k.lease)
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
	return b.fail(ctx, "ReleaseLease", err, k.lease)
}

// FindPendingBatch is [Backend.FetchBatch] without the report of the
// entries it parked.
func (b *Backend) FindPendingBatch(ctx context.Context, lease outbox.Lease, limit int) ([]outbox.Entry, error) {
	batch, err := b.fetch(ctx, "FindPendingBatch", lease, limit, nil)
	return batch.Entries, err
}

// FetchBatch runs claim.lua (one round trip): it returns up to limit due
// entries of lease.Partition in (due time, append order), skipping
// entries held back by a failing entry of their key. The lease is the
// claim: the entries stay in pending, unchanged, until they are finished,
// and a new holder (or this one, fetching again without finishing) reads
// them again. Per-key order comes from the partition's key-order set,
// never from scores: an entry with a key is claimed only after every entry
// before it in its key's order was claimed and none of those was attempted
// (docs/redis.md, "Ordering and hold-back").
//
// An entry whose stored value cannot be used is parked by the script, not
// returned, and reported in Batch.Parked (see [outbox.BatchFetcher]) with
// the key and topic that could be read and the reason, which names the
// field and the byte and is the entry's LastError: a value that does not
// decode or has an empty topic is quarantined (kept, with the raw value as
// its Payload, and refused by Requeue); a value whose pending member has
// another sequence than the value (and no member of its own) is parked
// as it is. A stray pending member is removed (docs/redis.md, "Corrupt
// entries and wrong-typed keys"). A value the script accepts and Go does
// not decode (none is expected) is parked through MarkFailed and reported
// the same way. Errors wrap [outbox.ErrLeaseLost] or
// [outbox.ErrInvalidArgument] (the checks of [outbox.CheckFetch]: limit
// not positive, partition out of range); a key of the partition of the
// wrong type gives an error naming it.
func (b *Backend) FetchBatch(ctx context.Context, lease outbox.Lease, limit int) (outbox.Batch, error) {
	return b.fetch(ctx, "FetchBatch", lease, limit, nil)
}

// FetchNext is [Backend.FetchBatch] while inFlight, the lease's unfinished
// claims, are still in flight (see [outbox.Prefetcher]): claim.lua passes
// over their pending members without reading their values, and the keys
// of the attempted ones are held back from the start. A never-attempted
// entry of inFlight holds back its key's later entries only when the
// partition's key-order set holds its member (an entry once held back or
// converted from format 1); they come with the next fetch.
func (b *Backend) FetchNext(ctx context.Context, lease outbox.Lease, limit int, inFlight []outbox.Entry) (outbox.Batch, error) {
	if inFlight == nil {
		inFlight = []outbox.Entry{}
	}
	return b.fetch(ctx, "FetchNext", lease, limit, inFlight)
}

// fetch runs claim.lua for FetchBatch, FindPendingBatch and (with a
// non-nil inFlight) FetchNext.
func (b *Backend) fetch(ctx context.Context, op string, lease outbox.Lease, limit int, inFlight []outbox.Entry) (outbox.Batch, error) {
	if err := b.check(ctx); err != nil {
		return outbox.Batch{}, err
	}
	if err := outbox.CheckFetch(len(b.parts), lease, limit); err != nil {
		return outbox.Batch{}, argErr(op, err)
	}
	k := &b.parts[lease.Partition]
	budget := 2*limit + 256 + len(inFlight)
	ks := []string{k.lease, k.pending, k.entries, k.keyorder, k.parked, k.hold, k.seq}
	front := &b.fronts[lease.Partition]
	hint, alone := front.hint(lease, inFlight)
	claim := func(alone bool) (any, error) {
		args := []any{token(lease), limit, budget}
		if inFlight == nil {
			return scriptClaim.Run(ctx, b.client, ks, args...).Result()
		}
		args = append(args, hint...)
		if alone {
			args = append(args, 0, 0)
		} else {
			args = append(args, b.inFlightArgs(lease, inFlight)...)
		}
		for i := range inFlight {
			if e := &inFlight[i]; e.Attempts > 0 && e.Key != "" {
				args = append(args, e.Key)
			}
		}
		return scriptClaim.Run(ctx, b.client, ks, args...).Result()
	}
	res, err := claim(alone)
	if code, ok := res.(int64); ok && code == codeHintRefused && err == nil {
		// The hint went without the entries in flight and did not hold:
		// claim again with them (and with them next time, see frontSlot).
		front.held(false)
		res, err = claim(false)
	}
	if err != nil {
		return outbox.Batch{}, b.fail(ctx, op, err, ks...)
	}
	if code, ok := res.(int64); ok {
		return outbox.Batch{}, codeErr(op, lease, code)
	}
	five, ok := res.([]any)
	if !ok || len(five) != 5 {
		return outbox.Batch{}, fmt.Errorf("redisoutbox: %s: unexpected script result %T", op, res)
	}
	flat, ok1 := five[0].([]any)
	parked, ok2 := five[1].([]any)
	gen, ok3 := five[2].(string)
	lscore, ok4 := five[3].(string)
	held, ok5 := five[4].(int64)
	if !ok1 || !ok2 || !ok3 || !ok4 || !ok5 || len(flat)%2 != 0 || len(parked)%4 != 0 {
		return outbox.Batch{}, fmt.Errorf("redisoutbox: %s: unexpected script result %v", op, res)
	}
	var batch outbox.Batch
	for i := 0; i < len(parked); i += 4 {
		var f [4]string
		for j := range f {
			f[j], _ = parked[i+j].(string)
		}
		batch.Parked = append(batch.Parked, outbox.CorruptEntry{ID: f[0], Key: f[1], Topic: f[2], Reason: f[3]})
	}
	batch.Entries = make([]outbox.Entry, 0, len(flat)/2)
	members := make(map[string]string, len(flat)/2)
	// undecodable: the entries Go's decoder refused, in the claim's order.
	var undecodable []refusal
	var pairs []any // member, ID of each refused format 2 entry
	for i := 0; i < len(flat); i += 2 {
		id, _ := flat[i].(string)
		raw, _ := flat[i+1].(string)
		var m string
		if len(raw) > 9 && raw[0] == encodingV2 {
			m = raw[1:9] + id
			members[id] = m
		}
		e, err := decodeEntry(id, lease.Partition, bytesOf(raw))
		if err == nil && e.Topic == "" {
			err = fmt.Errorf("%w: topic is empty", errCorrupt)
		}
		if err != nil {
			// The claim's fast path returns a format 2 value unchecked past
			// its attempts (claim.lua): quarantine.lua parks it below.
			undecodable = append(undecodable, refusal{id: id, e: e, err: err})
			if m != "" {
				pairs = append(pairs, m, id)
			}
			continue
		}
		batch.Entries = append(batch.Entries, e)
	}
	b.claims[lease.Partition].Remember(lease, members)
	if undecodable != nil {
		gen = "" // what was quarantined left the stretch the hint describes
	}
	if len(hint) > 0 && hint[0] != "" {
		front.held(held == 1)
	}
	front.remember(lease, gen, lscore, batch.Entries, members)
	if undecodable != nil {
		parked, err := b.quarantine(ctx, op, lease, pairs, undecodable)
		if err != nil {
			return outbox.Batch{}, err
		}
		batch.Parked = append(batch.Parked, parked...)
	}
	return batch, nil
}

// refusal is an entry a claim returned that Go's decoder refused: its ID,
// what the decoder could read of it, and why it refused it.
type refusal struct {
	id  string
	e   outbox.Entry
	err error
}

// quarantine parks the entries a claim returned that Go's decoder refused
// (refused; pairs holds the pending member and ID of those in
// format 2) and reports the parks. quarantine.lua quarantines each one it
// finds malformed, as the claim does in its general path. One it finds
// well formed (a format this build's decoder does not know, or a bug) is
// parked by MarkFailed with the decoder's reason, its stored value
// unchanged, so it never stalls the partition.
func (b *Backend) quarantine(ctx context.Context, op string, lease outbox.Lease, pairs []any, refused []refusal) ([]outbox.CorruptEntry, error) {
	k := &b.parts[lease.Partition]
	var out []outbox.CorruptEntry
	// done: refused entries the script parked, or found no longer pending
	// under the member the claim returned them under (nothing to park).
	done := map[string]bool{}
	if len(pairs) > 0 {
		ks := []string{k.lease, k.pending, k.entries, k.parked}
		res, err := scriptQuarantine.Run(ctx, b.client, ks, append([]any{token(lease)}, pairs...)...).Result()
		if err != nil {
			return nil, b.fail(ctx, op, err, ks...)
		}
		if code, ok := res.(int64); ok {
			return nil, codeErr(op, lease, code)
		}
		two, ok := res.([]any)
		if !ok || len(two) != 2 {
			return nil, fmt.Errorf("redisoutbox: %s: unexpected quarantine result %T", op, res)
		}
		parked, ok1 := two[0].([]any)
		sound, ok2 := two[1].([]any)
		if !ok1 || !ok2 || len(parked)%4 != 0 {
			return nil, fmt.Errorf("redisoutbox: %s: unexpected quarantine result %v", op, res)
		}
		for i := 0; i < len(parked); i += 4 {
			var f [4]string
			for j := range f {
				f[j], _ = parked[i+j].(string)
			}
			out = append(out, outbox.CorruptEntry{ID: f[0], Key: f[1], Topic: f[2], Reason: f[3]})
		}
		keep := make(map[string]bool, len(sound))
		for _, v := range sound {
			id, _ := v.(string)
			keep[id] = true
		}
		for i := 1; i < len(pairs); i += 2 {
			if id := pairs[i].(string); !keep[id] {
				done[id] = true
			}
		}
	}
	var failures []outbox.Failure
	for _, r := range refused {
		if done[r.id] {
			continue
		}
		reason := outbox.TruncateUTF8(r.err.Error()+" (parked by "+op+" after Go's decoder refused it; the stored value is unchanged)", b.opts.MaxErrorLen)
		failures = append(failures, outbox.Failure{ID: r.id, Park: true, Error: reason})
		out = append(out, outbox.CorruptEntry{ID: r.id, Key: r.e.Key, Topic: r.e.Topic, Reason: reason})
	}
	if len(failures) == 0 {
		return out, nil
	}
	if err := b.MarkFailed(ctx, lease, failures); err != nil {
		return nil, err
	}
	return out, nil
}

// inFlightArgs returns the ARGV of claim.lua for the entries in flight
// (but the keys of the attempted ones): the number of those whose pending
// member the partition's last two fetches under lease returned them
// under, those members, then the number of the others and their IDs. The
// script matches a member as it scans without taking the ID out of it.
func (b *Backend) inFlightArgs(lease outbox.Lease, inFlight []outbox.Entry) []any {
	ids := make([]string, len(inFlight))
	for i := range inFlight {
		ids[i] = inFlight[i].ID
	}
	members := make([]any, 1, 2+len(inFlight))
	var plain []any
	b.claims[lease.Partition].Each(lease, ids, func(id, member string, ok bool) {
		if ok {
			members = append(members, member)
		} else {
			plain = append(plain, id)
		}
	})
	members[0] = len(members) - 1
	return append(append(members, len(plain)), plain...)
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
		return b.fail(ctx, op, err, ks...)
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
	ks := []string{k.lease, k.pending, k.entries, k.keyorder, k.parked, k.seq}
	front := &b.fronts[lease.Partition]
	if hint := front.markHint(lease, ids); hint != nil {
		// The batch is the front of pending: remove it by rank, with no
		// members sent (see mark_sent.lua).
		args := make([]any, 0, 5+len(ids))
		args = append(append(append(args, token(lease), "front"), hint...), anys(ids)...)
		n, err := scriptMarkSent.Run(ctx, b.client, ks, args...).Int64()
		if err != nil {
			return b.fail(ctx, "MarkSent", err, ks...)
		}
		if n != codeHintRefused {
			if n < 0 {
				return codeErr("MarkSent", lease, n)
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
		[]string{k.lease, k.pending, k.entries, k.keyorder, k.parked, k.seq}, args)
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
	cmds := make([]*redis.Cmd, len(b.parts))
	ks := make([][]string, len(b.parts))
	_, err := b.client.Pipelined(ctx, func(pipe redis.Pipeliner) error {
		for p := range b.parts {
			var args []any
			ks[p], args = call(&b.parts[p])
			cmds[p] = pipe.EvalSha(ctx, s.Hash(), ks[p], args...)
		}
		return nil
	})
	if err != nil {
		retry := false
		for p, c := range cmds {
			if c.Err() != nil && !isNoScript(c.Err()) {
				return cmds, b.fail(ctx, op, c.Err(), ks[p]...)
			}
			retry = retry || isNoScript(c.Err())
		}
		if !retry {
			return nil, b.wrap(ctx, op, err)
		}
		_, err = b.client.Pipelined(ctx, func(pipe redis.Pipeliner) error {
			for p, c := range cmds {
				if isNoScript(c.Err()) {
					_, args := call(&b.parts[p])
					cmds[p] = pipe.Eval(ctx, s.src, ks[p], args...)
				}
			}
			return nil
		})
		if err != nil {
			for p, c := range cmds {
				if c.Err() != nil {
					return nil, b.fail(ctx, op, c.Err(), ks[p]...)
				}
			}
			return nil, b.wrap(ctx, op, err)
		}
	}
	return cmds, nil
}

// codeHintRefused is claim.lua's result when a front hint sent without the
// entries in flight did not hold.
const codeHintRefused = -4

// frontSlot holds a partition's front hints: what claim.lua needs to
// start a FetchNext behind the entries in flight instead of reading them
// again, and mark_sent.lua to remove a batch that is the front of pending
// by rank (see "The front hint" in claim.lua). The last two fetches under
// one lease set them (the relay marks a batch sent after it fetched the
// next one ahead). A FetchNext whose entries in flight are exactly the
// last fetch's result sends its hint; a MarkSent of exactly one of the
// two results sends that one's.
//
// The entries in flight (or the pending members MarkSent would otherwise
// send) go along only after a hint did not hold, until a FetchNext's hint
// holds again: while nothing but the relay writes the partition (a
// backlog draining) the hints hold every time, and the calls carry no
// list; while appends come in, each bumps the generation, the hints fail,
// and the lists go with every call, in one round trip (a hint sent alone
// that fails costs a second one, once).
type frontSlot struct {
	mu      sync.Mutex
	owner   string // the lease the hints were claimed under
	version int64
	cur     frontHint // the last fetch's
	prev    frontHint // the fetch before it, under the same lease
	// refused: the last hint sent did not hold.
	refused bool
}

// frontHint describes the result of one fetch; gen is "" for none.
type frontHint struct {
	gen   string // the sequence counter as the claim read it
	first string // ID and pending member of the first entry returned
	fm    string
	last  string // and of the last
	lm    string
	n     int
	// lscore: the pending score of the last entry returned, as the claim
	// read it
	lscore string
	byID   map[string]string // the pending member of every entry returned
}

// held records whether the last hint sent held.
func (f *frontSlot) held(ok bool) {
	f.mu.Lock()
	f.refused = !ok
	f.mu.Unlock()
}

// remember records the result of a fetch under lease: gen and lscore as
// claim.lua returned them, the entries returned and their pending members
// by ID (the map is kept, not copied: the caller no longer changes it).
func (f *frontSlot) remember(lease outbox.Lease, gen, lscore string, entries []outbox.Entry, members map[string]string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.owner == lease.Owner && f.version == lease.Version {
		f.prev = f.cur
	} else {
		f.prev = frontHint{}
	}
	f.owner, f.version, f.cur = lease.Owner, lease.Version, frontHint{}
	if gen == "" || len(entries) == 0 || len(members) != len(entries) {
		return
	}
	first, last := entries[0].ID, entries[len(entries)-1].ID
	f.cur = frontHint{gen: gen, first: first, fm: members[first], last: last, lm: members[last], n: len(entries), lscore: lscore, byID: members}
}

// hint returns claim.lua's ARGV[4..8] for a FetchNext under lease with
// inFlight (nil, false for another fetch): the hint when inFlight is what
// the last fetch returned under lease, else an empty generation; and
// whether to send it without the entries in flight (the last hint sent
// held).
func (f *frontSlot) hint(lease outbox.Lease, inFlight []outbox.Entry) (args []any, alone bool) {
	if inFlight == nil {
		return nil, false
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	h := &f.cur
	if h.gen == "" || f.owner != lease.Owner || f.version != lease.Version || len(inFlight) != h.n || inFlight[0].ID != h.first || inFlight[len(inFlight)-1].ID != h.last {
		return []any{"", "", "", 0, ""}, false
	}
	return []any{h.gen, h.fm, h.lm, h.n, h.lscore}, !f.refused
}

// markHint returns mark_sent.lua's ARGV[3..5] (generation, first and last
// member) when ids are exactly the entries one of the last two fetches
// under lease returned, in any order, and the last hint sent held; else
// nil.
func (f *frontSlot) markHint(lease outbox.Lease, ids []string) []any {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.refused || f.owner != lease.Owner || f.version != lease.Version {
		return nil
	}
	for _, h := range []*frontHint{&f.cur, &f.prev} {
		if h.gen == "" || len(ids) != h.n {
			continue
		}
		seen := make(map[string]bool, len(ids))
		all := true
		for _, id := range ids {
			if _, ok := h.byID[id]; !ok || seen[id] {
				all = false
				break
			}
			seen[id] = true
		}
		if all {
			return []any{h.gen, h.fm, h.lm}
		}
	}
	return nil
}
