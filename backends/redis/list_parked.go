package redisoutbox

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/outboxrelay/outbox"
)

// parkedCursor walks one partition's parked set by ID: buf holds the next
// IDs read, more whether the set may hold IDs after them, last the last ID
// read (where the next read starts).
type parkedCursor struct {
	buf  []string
	more bool
	last string
}

// parkedEntries is Entries for StateParked: each partition's parked set is
// read by ID in chunks of parkedChunk (ZRANGEBYLEX) and the partitions'
// chunks are merged, so the IDs are taken in byte order across
// partitions; the values of up to valueChunk of them are read at a time
// and filtered, until limit entries match or every set is passed.
func (b *Backend) parkedEntries(ctx context.Context, filter outbox.ListFilter, after string, limit int) ([]outbox.EntryInfo, error) {
	const op = "Entries"
	cur := make([]parkedCursor, len(b.parts))
	for p := range cur {
		cur[p] = parkedCursor{more: true, last: after}
	}
	var out []outbox.EntryInfo
	for len(out) < limit {
		if err := b.refillParked(ctx, op, cur); err != nil {
			return nil, err
		}
		refs, order := takeParked(cur)
		if len(order) == 0 {
			return out, nil
		}
		vals, hists, err := b.readValues(ctx, op, refs)
		if err != nil {
			return nil, err
		}
		next := map[int]int{}
		for _, p := range order {
			i := next[p]
			next[p]++
			raw, ok := vals[p][i].(string)
			if !ok || len(out) >= limit {
				continue // cancelled since
			}
			id := refs[p][i]
			e, err := decodeEntry(id, p, []byte(raw))
			if err != nil {
				e.LastError, e.Payload = err.Error(), []byte(raw)
			}
			if !matchesRow(&filter, e.Topic, e.Key, e.CreatedAt) || !matchesError(&filter, e.LastError) {
				continue
			}
			info := outbox.EntryInfo{Entry: e, Parked: true}
			hist, _ := hists[p][i].(string)
			info.History, _ = decodeHistory(hist)
			out = append(out, info)
		}
	}
	return out, nil
}

// refillParked reads the next chunk of every cursor whose buffer is empty
// and that may have more (one pipeline).
func (b *Backend) refillParked(ctx context.Context, op string, cur []parkedCursor) error {
	cmds := map[int]*redis.StringSliceCmd{}
	var ks []string
	_, err := b.client.Pipelined(ctx, func(pipe redis.Pipeliner) error {
		for p := range cur {
			if len(cur[p].buf) == 0 && cur[p].more {
				lo := "-"
				if cur[p].last != "" {
					lo = "(" + cur[p].last
				}
				ks = append(ks, b.parts[p].parked)
				cmds[p] = pipe.ZRangeByLex(ctx, b.parts[p].parked, &redis.ZRangeBy{Min: lo, Max: "+", Count: parkedChunk})
			}
		}
		return nil
	})
	if err != nil {
		return b.mapErr(ctx, op, err, ks...)
	}
	for p, c := range cmds {
		ids := c.Val()
		cur[p].buf, cur[p].more = ids, len(ids) == parkedChunk
		if len(ids) > 0 {
			cur[p].last = ids[len(ids)-1]
		}
	}
	return nil
}

// takeParked takes up to valueChunk IDs from the cursors in byte order,
// stopping early when a cursor that may have more runs empty (its next
// IDs must be read before any later ID is taken). It returns the IDs by
// partition and the partition of each ID taken, in order.
func takeParked(cur []parkedCursor) (map[int][]string, []int) {
	refs := map[int][]string{}
	var order []int
	for len(order) < valueChunk {
		best := -1
		for p := range cur {
			if len(cur[p].buf) == 0 {
				if cur[p].more {
					return refs, order
				}
				continue
			}
			if best < 0 || cur[p].buf[0] < cur[best].buf[0] {
				best = p
			}
		}
		if best < 0 {
			break
		}
		refs[best] = append(refs[best], cur[best].buf[0])
		cur[best].buf = cur[best].buf[1:]
		order = append(order, best)
	}
	return refs, order
}

// sinceOf is when a blocked key's head started blocking it: its oldest
// attempt, else its creation.
func sinceOf(info *outbox.EntryInfo) time.Time {
	if len(info.History) > 0 {
		return info.History[0].At
	}
	return info.CreatedAt
}
