package redisoutbox

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/outboxrelay/outbox"
)

// Cancel deletes a pending, claimed or parked entry. Only the ID is known,
// not the partition, so it runs cancel.lua on every partition in one
// pipeline (one round trip per node; a partition without the ID answers
// "not found" cheaply). It returns an error wrapping [outbox.ErrNotFound]
// when no partition has the entry.
//
// Cancelling a failing entry frees the later entries of its key at once
// (cancel.lua moves up to 1000 of those FindPendingBatch had set aside
// behind it back to due; any rest become due at its retry time).
func (b *Backend) Cancel(ctx context.Context, id string) error {
	if err := b.check(ctx); err != nil {
		return err
	}
	cmds, err := b.runEach(ctx, "Cancel", scriptCancel, func(k *keys) ([]string, []any) {
		return []string{k.entries, k.pending, k.parked, k.keyorder, k.seq, k.history, k.parkedat}, []any{id}
	})
	if err != nil {
		return err
	}
	for _, c := range cmds {
		if n, _ := c.Int64(); n > 0 {
			return nil
		}
	}
	return fmt.Errorf("redisoutbox: Cancel: no pending or parked entry has ID %q (never appended, already sent or cancelled): %w", id, outbox.ErrNotFound)
}

// Stats sums [Backend.PartitionStats] over the partitions: the same
// pipeline of stats.lua, one round trip per node. Pending includes claimed
// entries; Due counts pending entries whose next attempt time has come
// (claimed ones included); OldestDue is the earliest next attempt time
// among them. Each partition is read atomically, the partitions one after
// the other (on Cluster, on several nodes at once), so the counts of
// different partitions may be a few moments apart.
//
// Pending members that name no entry (a value of their sequence), written
// by hand, are neither the oldest due entry nor counted, as far as
// stats.lua looks (the first 100 due members of each partition; see its
// header), and each call that meets them logs a warning naming the key.
// A key of the wrong type gives an error naming it.
func (b *Backend) Stats(ctx context.Context) (outbox.Stats, error) {
	parts, err := b.partitionStats(ctx, "Stats", false)
	if err != nil {
		return outbox.Stats{}, err
	}
	var s outbox.Stats
	for _, p := range parts {
		s.Pending += p.Pending
		s.Due += p.Due
		s.Parked += p.Parked
		if !p.OldestDue.IsZero() && (s.OldestDue.IsZero() || p.OldestDue.Before(s.OldestDue)) {
			s.OldestDue = p.OldestDue
		}
	}
	return s, nil
}

// PartitionStats reports every partition's counts, as [Backend.Stats]
// defines them, and its live lease: stats.lua runs once per partition, all
// in one pipeline (one round trip per node), and reads the partition's
// counts and its lease key ("version:owner" and its PTTL) in one atomic
// step by the server's TIME. Lease.Expires is that time plus the PTTL; it
// is zero for a lease key without an expiry (set by hand). A partition
// without a lease key (free, released or expired) has a zero Lease. The
// counts of all partitions add up to what Stats reports; across partitions
// the reads are a few moments apart, as Stats's are. A lease key that
// does not hold "version:owner" gives an error naming it. OldestDueID is
// the ID of the entry OldestDue is the due time of (read in the same
// step). BlockedKeys counts the keys [Backend.BlockedKeys] would list in
// the partition, found as it finds them (every pending entry is scanned,
// after the counts: a few more round trips, a moment later). See
// [outbox.PartitionInspector].
func (b *Backend) PartitionStats(ctx context.Context) ([]outbox.PartitionStats, error) {
	return b.partitionStats(ctx, "PartitionStats", true)
}

// partitionStats runs stats.lua on every partition (one pipeline) and
// decodes its results, the leases too when withLease is set. Stats and
// PartitionStats share it.
func (b *Backend) partitionStats(ctx context.Context, op string, withLease bool) ([]outbox.PartitionStats, error) {
	if err := b.check(ctx); err != nil {
		return nil, err
	}
	cmds, err := b.runEach(ctx, op, scriptStats, func(k *keys) ([]string, []any) {
		return []string{k.pending, k.parked, k.lease, k.entries, k.keyorder, k.history}, nil
	})
	if err != nil {
		return nil, err
	}
	out := make([]outbox.PartitionStats, len(cmds))
	for p, c := range cmds {
		v, err := c.Slice()
		if err != nil || len(v) != 9 {
			return nil, fmt.Errorf("redisoutbox: %s: unexpected result %v (%v) of stats.lua on partition %d", op, c.Val(), err, p)
		}
		var n [5]int64
		for i := range n {
			if n[i], err = asInt64(v[i]); err != nil {
				return nil, fmt.Errorf("redisoutbox: %s: result %d of stats.lua on partition %d: %w", op, i, p, err)
			}
		}
		garbage, err := asInt64(v[7])
		if err != nil {
			return nil, fmt.Errorf("redisoutbox: %s: result 7 of stats.lua on partition %d: %w", op, p, err)
		}
		if garbage > 0 {
			b.opts.Logger.Warn("redisoutbox: the pending set holds members that name no entry (written by hand?); they are not counted, and FindPendingBatch removes them when it reaches them",
				"key", b.parts[p].pending, "seen", garbage)
		}
		s := &out[p]
		s.Partition = p
		s.Pending, s.Due, s.Parked = max(0, n[0]-garbage), max(0, n[1]-garbage), n[2]
		if n[3] >= 0 {
			s.OldestDue = time.UnixMilli(n[3])
		}
		if !withLease {
			continue
		}
		s.OldestDueID, _ = v[8].(string)
		token, _ := v[5].(string)
		pttl, err := asInt64(v[6])
		if err != nil {
			return nil, fmt.Errorf("redisoutbox: %s: lease PTTL of partition %d: %w", op, p, err)
		}
		if token == "" || pttl == -2 {
			continue
		}
		if s.Lease, err = parseLease(p, token); err != nil {
			return nil, fmt.Errorf("redisoutbox: %s: the lease key %q %w", op, b.parts[p].lease, err)
		}
		if pttl >= 0 {
			s.Lease.Expires = time.UnixMilli(n[4] + pttl)
		}
	}
	if withLease {
		heads, err := b.blockedHeads(ctx, op)
		if err != nil {
			return nil, err
		}
		for p := range heads {
			out[p].BlockedKeys = int64(len(heads[p]))
		}
	}
	return out, nil
}

// parseLease decodes a lease key's value, "version:owner".
func parseLease(partition int, token string) (outbox.Lease, error) {
	ver, owner, ok := strings.Cut(token, ":")
	v, err := strconv.ParseInt(ver, 10, 64)
	if !ok || err != nil || owner == "" {
		return outbox.Lease{}, fmt.Errorf("holds %q, not \"version:owner\": it was not written by redisoutbox; delete it to free the partition", token)
	}
	return outbox.Lease{Partition: partition, Owner: owner, Version: v}, nil
}

// asInt64 reads an integer of a script's result.
func asInt64(v any) (int64, error) {
	n, ok := v.(int64)
	if !ok {
		return 0, fmt.Errorf("%v (%T) is not an integer", v, v)
	}
	return n, nil
}

// Lookup returns the pending or parked entry with the given ID. The entry's
// partition follows from its key, not its ID, so lookup.lua runs on every
// partition in one pipeline (one round trip per node; on Cluster go-redis
// groups the calls by node): P script calls for P partitions, each an HGET
// of the entries hash and, in the partition that has the entry, one or two
// ZSCOREs, read in one atomic step. A partition without the ID answers at
// the cost of the HGET of a missing field.
//
// DueAt is by the server's clock, in whole ms: for an entry never attempted,
// its position (its NotBefore, rounded up, or append time; the requeue time
// after a requeue), even when it waits behind a failing entry of its key
// (the claim may have moved its score to that entry's retry time); for a
// retrying entry, the retry time MarkFailed stored; for a deferred one
// ([outbox.Failure.Deferred]), its deferral time (Deferred is then true
// while it is pending). An entry the claim set aside while its topic is
// paused reports the time it had. It is zero for a parked entry. History
// is the entry's last attempts, oldest first, from the partition's history
// hash (read in the same step; nil when it was never attempted). An ID appended under keys of two partitions (possible only across
// partitions, since idempotency is per partition) reports the lowest one.
// A quarantined entry (parked by the claim because its stored value could
// not be used) is reported parked, with the key and topic that could be
// read, the reason as LastError and the raw value as Payload. A stored
// value that does not decode gives an error naming the entry and the
// field. See [outbox.Looker].
func (b *Backend) Lookup(ctx context.Context, id string) (outbox.EntryInfo, error) {
	const op = "Lookup"
	if err := b.check(ctx); err != nil {
		return outbox.EntryInfo{}, err
	}
	cmds, err := b.runEach(ctx, op, scriptLookup, func(k *keys) ([]string, []any) {
		return []string{k.entries, k.pending, k.parked, k.history}, []any{id}
	})
	if err != nil {
		return outbox.EntryInfo{}, err
	}
	for p, c := range cmds {
		if n, ok := c.Val().(int64); ok && n == 0 {
			continue
		}
		v, ok := c.Val().([]any)
		if !ok || len(v) != 4 {
			return outbox.EntryInfo{}, fmt.Errorf("redisoutbox: %s: unexpected result %v of lookup.lua on partition %d", op, c.Val(), p)
		}
		raw, _ := v[0].(string)
		state, _ := v[1].(int64)
		score, _ := v[2].(string)
		hist, _ := v[3].(string)
		return b.entryInfo(op, id, p, []byte(raw), state, score, hist)
	}
	return outbox.EntryInfo{}, fmt.Errorf("redisoutbox: %s: no pending or parked entry has ID %q (never appended, already sent or cancelled): %w", op, id, outbox.ErrNotFound)
}

// entryInfo builds Lookup's answer from lookup.lua's result on partition p.
// hist is the entry's history value ("" for none).
func (b *Backend) entryInfo(op, id string, p int, raw []byte, state int64, score, hist string) (outbox.EntryInfo, error) {
	entries := b.parts[p].entries
	e, err := decodeEntry(id, p, raw)
	if err != nil {
		return outbox.EntryInfo{}, fmt.Errorf("redisoutbox: %s: entry %q of partition %d (field of %q) cannot be read: %w; FindPendingBatch parks a pending entry like this when it reaches it, Cancel deletes it", op, id, p, entries, err)
	}
	info := outbox.EntryInfo{Entry: e}
	var deferred bool
	info.History, deferred = decodeHistory(hist)
	switch state {
	case 1:
		ms, err := strconv.ParseFloat(score, 64)
		if err != nil {
			return outbox.EntryInfo{}, fmt.Errorf("redisoutbox: %s: entry %q of partition %d has pending score %q, not a time in ms", op, id, p, score)
		}
		info.Deferred = deferred
		info.DueAt = time.UnixMilli(dueAt(raw, e.Attempts, deferred, int64(ms)))
	case 2:
		info.Parked = true
	default:
		return outbox.EntryInfo{}, fmt.Errorf("redisoutbox: %s: entry %q is stored in %q but is neither pending nor parked (no member of %q or %q names it; an entry claimed by a build before v0.2 comes back to pending at the partition's next lease grant); it was changed by something other than redisoutbox: Cancel deletes it",
			op, id, entries, b.parts[p].pending, b.parts[p].parked)
	}
	return info, nil
}

// dueAt is the next attempt time (Unix ms) of a pending entry with stored
// value raw, attempts and deferred flag, and pending score: the score for
// an attempted or deferred entry, else its position (the claim may have
// re-scored it behind a failing entry of its key; that is not its own
// time).
func dueAt(raw []byte, attempts int, deferred bool, score int64) int64 {
	if attempts > 0 || deferred {
		return score
	}
	if pos, ok := position(raw); ok {
		return pos
	}
	return score
}

// Parked lists parked entries by ID (byte order) after the given ID, at
// most limit of them: parked.lua pages each partition (one pipeline) and
// the pages are merged. An entry that was parked because its stored value
// could not be used (quarantined by the claim) comes back with the key and
// topic that could be read, its LastError saying why and its raw stored
// value as Payload; a parked value that does not decode (damaged after it
// was parked) likewise, with the decoder's error as LastError. A member of
// the parked set without a value is skipped.
func (b *Backend) Parked(ctx context.Context, after string, limit int) ([]outbox.Entry, error) {
	if err := b.check(ctx); err != nil {
		return nil, err
	}
	if limit <= 0 {
		return nil, fmt.Errorf("redisoutbox: Parked limit is %d; it must be positive: %w", limit, outbox.ErrInvalidArgument)
	}
	cmds, err := b.runEach(ctx, "Parked", scriptParked, func(k *keys) ([]string, []any) {
		return []string{k.parked, k.entries}, []any{after, limit}
	})
	if err != nil {
		return nil, err
	}
	var out []outbox.Entry
	for p, c := range cmds {
		flat, err := c.Slice()
		if err != nil {
			return nil, b.mapErr(ctx, "Parked", err)
		}
		for i := 0; i+1 < len(flat); i += 2 {
			id, _ := flat[i].(string)
			raw, _ := flat[i+1].(string)
			e, err := decodeEntry(id, p, []byte(raw))
			if err != nil {
				e.LastError = err.Error()
				e.Payload = []byte(raw)
			}
			out = append(out, e)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	if len(out) > limit {
		out = out[:limit]
	}
	return out, nil
}

// Requeue moves parked entries back to pending, due now, with Attempts
// reset to 0 and LastError kept: requeue.lua runs on every partition with
// all the IDs (one pipeline), since only the IDs are known. IDs that are
// not parked are ignored. It returns how many entries were requeued. A
// requeued entry gets a new append sequence, so it orders after the entries
// already due when it was requeued (requeued entries keep their order among
// themselves).
//
// An entry that can never be published as stored stays parked: one
// FindPendingBatch quarantined (its value did not decode, or its topic was
// empty), one whose value does not decode, one with an empty topic. The
// others are requeued in the same call, and the error is an
// [*outbox.RequeueRefusedError] (wrapping [outbox.ErrNotRequeueable])
// listing the refused entries in the order of ids, each with the reason.
// When the script fails on a partition (a key of the wrong type, named in
// the error), the other partitions were requeued and counted.
func (b *Backend) Requeue(ctx context.Context, ids ...string) (int, error) {
	if err := b.check(ctx); err != nil {
		return 0, err
	}
	if len(ids) == 0 {
		return 0, nil
	}
	args := anys(ids)
	cmds, err := b.runEach(ctx, "Requeue", scriptRequeue, func(k *keys) ([]string, []any) {
		return []string{k.entries, k.pending, k.parked, k.seq, k.history, k.parkedat}, args
	})
	if cmds == nil {
		return 0, err
	}
	n := 0
	why := map[string]string{}
	for p, c := range cmds {
		if c.Err() != nil {
			continue
		}
		v, ok := c.Val().([]any)
		if !ok || len(v) != 2 {
			return n, fmt.Errorf("redisoutbox: Requeue: unexpected result %v of requeue.lua on partition %d", c.Val(), p)
		}
		m, _ := v[0].(int64)
		n += int(m)
		refused, _ := v[1].([]any)
		for i := 0; i+1 < len(refused); i += 2 {
			id, _ := refused[i].(string)
			reason, _ := refused[i+1].(string)
			if _, dup := why[id]; !dup {
				why[id] = reason
			}
		}
	}
	if err != nil {
		return n, err
	}
	if len(why) == 0 {
		return n, nil
	}
	rerr := &outbox.RequeueRefusedError{}
	for _, id := range ids {
		if reason, ok := why[id]; ok {
			rerr.Refused = append(rerr.Refused, outbox.Refusal{ID: id, Reason: reason})
			delete(why, id)
		}
	}
	return n, rerr
}
