package redisoutbox

import (
	"context"
	"sort"

	"github.com/redis/go-redis/v9"

	"github.com/outboxrelay/outbox"
)

// blockedHead is a key's head entry as the scan found it, with the number
// of the key's pending entries after it.
type blockedHead struct {
	row     *pendingRow
	waiting int64
}

// blockedHeads finds, in every partition, the keys whose head entry holds
// them back (see [Backend.BlockedKeys]): every pending entry is read with
// scan.lua, the keyed ones are grouped by key, the head of each key is the
// first in its key's order (position, then append sequence), and it
// blocks when it was attempted, deferred or its topic is paused (as
// Paused reports it). A partition whose key-order set and paused hash do
// not exist has no blocked key (an attempted or deferred keyed entry is
// marked while pending, and only a paused topic blocks an unmarked one),
// so it is not scanned: while nothing fails and nothing is paused, this
// costs one pipeline of EXISTS.
func (b *Backend) blockedHeads(ctx context.Context, op string) ([][]blockedHead, error) {
	paused, err := b.Paused(ctx)
	if err != nil {
		return nil, err
	}
	topics := make(map[string]bool, len(paused.Topics))
	for _, t := range paused.Topics {
		topics[t.Topic] = true
	}
	ps, err := b.mayBlock(ctx, op)
	if err != nil {
		return nil, err
	}
	rows, _, err := b.scanParts(ctx, op, ps)
	if err != nil {
		return nil, err
	}
	out := make([][]blockedHead, len(b.parts))
	for p := range rows {
		heads := map[string]*blockedHead{}
		for i := range rows[p] {
			r := &rows[p][i]
			if r.key == "" {
				continue
			}
			h := heads[r.key]
			switch {
			case h == nil:
				heads[r.key] = &blockedHead{row: r}
			case r.before(h.row):
				h.row = r
				h.waiting++
			default:
				h.waiting++
			}
		}
		for _, h := range heads {
			if h.row.attempts > 0 || h.row.deferred || topics[h.row.topic] {
				out[p] = append(out[p], *h)
			}
		}
	}
	return out, nil
}

// BlockedKeys lists the keys held back by their head entry (see
// [outbox.Lister]): blockedHeads, then the values and histories of the
// heads that match the filter (valueChunk per HMGET), ordered by Since
// (the head's oldest attempt, else its creation, in ms) and the head's ID,
// after the key whose Since and head ID are after's, at most limit of
// them. Its work grows with the pending entries (every one is scanned).
func (b *Backend) BlockedKeys(ctx context.Context, filter outbox.ListFilter, after outbox.BlockedKey, limit int) ([]outbox.BlockedKey, error) {
	const op = "BlockedKeys"
	if err := b.checkList(ctx, op, limit); err != nil {
		return nil, err
	}
	heads, err := b.blockedHeads(ctx, op)
	if err != nil {
		return nil, err
	}
	var cands []blockedHead
	for p := range heads {
		for _, h := range heads[p] {
			if matchesRow(&filter, h.row.topic, h.row.key, timeMicro(h.row.created)) {
				cands = append(cands, h)
			}
		}
	}
	var out []outbox.BlockedKey
	for lo := 0; lo < len(cands); lo += valueChunk {
		chunk := cands[lo:min(lo+valueChunk, len(cands))]
		rows := make([]*pendingRow, len(chunk))
		for i := range chunk {
			rows[i] = chunk[i].row
		}
		infos, err := b.pendingInfos(ctx, op, rows)
		if err != nil {
			return nil, err
		}
		for i, info := range infos {
			if info == nil || !matchesError(&filter, info.LastError) {
				continue
			}
			k := outbox.BlockedKey{Head: *info, Waiting: chunk[i].waiting, Since: sinceOf(info)}
			if blockedAfter(&k, &after) {
				out = append(out, k)
			}
		}
	}
	sort.Slice(out, func(i, j int) bool { return blockedBefore(&out[i], &out[j]) })
	if len(out) > limit {
		out = out[:limit]
	}
	return out, nil
}

// blockedBefore orders blocked keys: Since, then the head's ID (then its
// partition, for an ID appended to two partitions).
func blockedBefore(a, b *outbox.BlockedKey) bool {
	if !a.Since.Equal(b.Since) {
		return a.Since.Before(b.Since)
	}
	if a.Head.ID != b.Head.ID {
		return a.Head.ID < b.Head.ID
	}
	return a.Head.Partition < b.Head.Partition
}

// blockedAfter reports whether k comes after the page boundary after (the
// zero BlockedKey: before every key).
func blockedAfter(k, after *outbox.BlockedKey) bool {
	if after.Since.IsZero() && after.Head.ID == "" {
		return true
	}
	if !k.Since.Equal(after.Since) {
		return k.Since.After(after.Since)
	}
	return k.Head.ID > after.Head.ID
}

// mayBlock returns the partitions whose key-order set or paused hash
// exists (one pipeline of EXISTS): the only ones that can have blocked
// keys.
func (b *Backend) mayBlock(ctx context.Context, op string) ([]int, error) {
	cmds := make([]*redis.IntCmd, len(b.parts))
	_, err := b.client.Pipelined(ctx, func(pipe redis.Pipeliner) error {
		for p := range b.parts {
			cmds[p] = pipe.Exists(ctx, b.parts[p].keyorder, b.parts[p].paused)
		}
		return nil
	})
	if err != nil {
		return nil, b.mapErr(ctx, op, err)
	}
	var ps []int
	for p, c := range cmds {
		if c.Val() > 0 {
			ps = append(ps, p)
		}
	}
	return ps, nil
}
