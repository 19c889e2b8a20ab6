package redisoutbox

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/outboxrelay/outbox"
)

// The Lister: entries by state and blocked keys. Pending entries have no
// index by ID, so a listing of pending entries reads every partition's
// pending set with scan.lua, scanChunk members per call (the partitions
// in one pipeline per round): IDs, scores and the header fields of each
// value (no payload crosses the network), from which Go selects the
// entries of the page; then it reads the values and histories of those
// (HMGET, valueChunk IDs per partition per round trip). Parked entries are
// paged by ID from each partition's parked set (ZRANGEBYLEX, parkedChunk
// IDs per call) and merged. Every script call and command reads a bounded
// chunk; a call's total work grows with the pending entries (a pending
// listing or BlockedKeys) or with the parked entries it passes over (a
// filtered parked listing).

const (
	scanChunk   = 1000 // pending members per scan.lua call
	valueChunk  = 256  // values per HMGET
	parkedChunk = 512  // parked IDs per ZRANGEBYLEX
)

// pendingRow is what scan.lua reports of one pending entry.
type pendingRow struct {
	id         string
	p          int
	score, pos int64 // ms
	seq        int64
	attempts   int64
	created    int64 // µs
	deferred   bool
	key, topic string
}

// due is the row's next attempt time in ms (see dueAt).
func (r *pendingRow) due() int64 {
	if r.attempts > 0 || r.deferred {
		return r.score
	}
	return r.pos
}

// state is the row's state at now (ms).
func (r *pendingRow) state(now int64) outbox.EntryState {
	switch {
	case r.due() <= now:
		return outbox.StateDue
	case r.attempts > 0:
		return outbox.StateRetrying
	default:
		return outbox.StateScheduled
	}
}

// before orders two rows of one key by the key's order: position, then
// append sequence.
func (r *pendingRow) before(o *pendingRow) bool {
	if r.pos != o.pos {
		return r.pos < o.pos
	}
	return r.seq < o.seq
}

// matchesRow applies the parts of f that the row holds (all but Error).
func matchesRow(f *outbox.ListFilter, topic, key string, created time.Time) bool {
	if f.Topic != "" && topic != f.Topic || f.Key != "" && key != f.Key {
		return false
	}
	if !f.Since.IsZero() && created.Before(f.Since) || !f.Until.IsZero() && !created.Before(f.Until) {
		return false
	}
	return true
}

// matchesError applies f.Error: a substring of lastError, ASCII letters
// folded.
func matchesError(f *outbox.ListFilter, lastError string) bool {
	return f.Error == "" || strings.Contains(asciiLower(lastError), asciiLower(f.Error))
}

func asciiLower(s string) string {
	b := []byte(s)
	for i, c := range b {
		if 'A' <= c && c <= 'Z' {
			b[i] = c + 'a' - 'A'
		}
	}
	return string(b)
}

// checkList checks the arguments common to Entries and BlockedKeys.
func (b *Backend) checkList(ctx context.Context, op string, limit int) error {
	if err := b.check(ctx); err != nil {
		return err
	}
	if limit <= 0 {
		return fmt.Errorf("redisoutbox: %s: limit is %d; it must be positive: %w", op, limit, outbox.ErrInvalidArgument)
	}
	return nil
}

// Entries lists the entries in state that match filter, in byte order of
// their IDs after the ID after, at most limit of them, each as
// [Backend.Lookup] reports it (with its history). Due, scheduled and
// retrying entries are judged by the server's clock at the call (the time
// of its first scan.lua call): due when its next attempt time
// ([outbox.EntryInfo.DueAt]) has come; else retrying when attempted,
// scheduled when not. A pending listing reads every partition's pending
// set (see the top of list.go); a parked one pages the parked sets by ID.
// A pending value that does not decode is not listed (FindPendingBatch
// parks it); a parked one is, with the decoder's error as LastError and the
// raw value as Payload, as [Backend.Parked] reports it. See
// [outbox.Lister].
func (b *Backend) Entries(ctx context.Context, state outbox.EntryState, filter outbox.ListFilter, after string, limit int) ([]outbox.EntryInfo, error) {
	const op = "Entries"
	if err := b.checkList(ctx, op, limit); err != nil {
		return nil, err
	}
	switch state {
	case outbox.StateParked:
		return b.parkedEntries(ctx, filter, after, limit)
	case outbox.StateDue, outbox.StateScheduled, outbox.StateRetrying:
	default:
		return nil, fmt.Errorf("redisoutbox: %s: unknown state %q; use one of %v: %w", op, state, outbox.EntryStates, outbox.ErrInvalidArgument)
	}
	rows, now, err := b.scanPending(ctx, op)
	if err != nil {
		return nil, err
	}
	var cands []*pendingRow
	for p := range rows {
		for i := range rows[p] {
			r := &rows[p][i]
			if r.id > after && r.state(now) == state && matchesRow(&filter, r.topic, r.key, timeMicro(r.created)) {
				cands = append(cands, r)
			}
		}
	}
	sort.Slice(cands, func(i, j int) bool {
		if cands[i].id != cands[j].id {
			return cands[i].id < cands[j].id
		}
		return cands[i].p < cands[j].p
	})
	var out []outbox.EntryInfo
	for lo := 0; lo < len(cands) && len(out) < limit; lo += valueChunk {
		chunk := cands[lo:min(lo+valueChunk, len(cands))]
		infos, err := b.pendingInfos(ctx, op, chunk)
		if err != nil {
			return nil, err
		}
		for _, info := range infos {
			if info != nil && matchesError(&filter, info.LastError) && len(out) < limit {
				out = append(out, *info)
			}
		}
	}
	return out, nil
}

// scanPending reads every pending entry of every partition with scan.lua
// (see the top of list.go): the rows by partition, and the server's time
// (ms) of the first call. An ID met twice in a partition (its member moved
// between two calls) is kept once.
func (b *Backend) scanPending(ctx context.Context, op string) ([][]pendingRow, int64, error) {
	return b.scanParts(ctx, op, b.allParts())
}

// scanParts is scanPending of the partitions ps (the rows of the others
// are empty).
func (b *Backend) scanParts(ctx context.Context, op string, ps []int) ([][]pendingRow, int64, error) {
	rows := make([][]pendingRow, len(b.parts))
	seen := make([]map[string]bool, len(b.parts))
	start := make([]int64, len(b.parts))
	now := int64(-1)
	for todo := ps; len(todo) > 0; {
		cmds, err := b.runOn(ctx, op, scriptScan, todo, func(p int) ([]string, []any) {
			k := &b.parts[p]
			return []string{k.pending, k.entries, k.history}, []any{start[p], scanChunk}
		})
		if err != nil {
			return nil, 0, err
		}
		var next []int
		for i, c := range cmds {
			p := todo[i]
			res, err := c.Slice()
			if err != nil || len(res) != 3 {
				return nil, 0, fmt.Errorf("redisoutbox: %s: unexpected result %v (%v) of scan.lua on partition %d", op, c.Val(), err, p)
			}
			t, err1 := asInt64(res[0])
			n, err2 := asInt64(res[1])
			flat, ok := res[2].([]any)
			if err1 != nil || err2 != nil || !ok || len(flat)%scanFields != 0 {
				return nil, 0, fmt.Errorf("redisoutbox: %s: unexpected result %v of scan.lua on partition %d", op, res, p)
			}
			if now < 0 {
				now = t
			}
			if seen[p] == nil {
				seen[p] = map[string]bool{}
			}
			for j := 0; j < len(flat); j += scanFields {
				r, ok := scanRow(p, flat[j:j+scanFields])
				if ok && !seen[p][r.id] {
					seen[p][r.id] = true
					rows[p] = append(rows[p], r)
				}
			}
			start[p] += n
			if n == scanChunk {
				next = append(next, p)
			}
		}
		todo = next
	}
	return rows, now, nil
}

// scanFields is how many fields scan.lua reports per entry.
const scanFields = 6

// scanRow reads the fields scan.lua reports of one entry: id, score,
// header (sequence, created-at, position, attempts: bytes 1-28 of a
// format 2 value), deferred, key, topic.
func scanRow(p int, f []any) (pendingRow, bool) {
	r := pendingRow{p: p}
	var ok [4]bool
	r.id, ok[0] = f[0].(string)
	score, err := asInt64(f[1])
	r.score = score
	hdr, ok1 := f[2].(string)
	d, err2 := asInt64(f[3])
	r.key, ok[1] = f[4].(string)
	r.topic, ok[2] = f[5].(string)
	if !ok1 || len(hdr) != 28 || err != nil || err2 != nil {
		return r, false
	}
	r.seq = int64(beUint64(hdr[0:8]))
	r.created = int64(beUint64(hdr[8:16]))
	r.pos = int64(beUint64(hdr[16:24]))
	r.attempts = int64(uint32(hdr[24])<<24 | uint32(hdr[25])<<16 | uint32(hdr[26])<<8 | uint32(hdr[27]))
	r.deferred = d == 1
	return r, ok[0] && ok[1] && ok[2]
}

// readValues reads the values and histories of ids of partition p...
// for each partition of refs, one pipeline: HMGET of the entries hash and
// of the history hash per partition.
func (b *Backend) readValues(ctx context.Context, op string, refs map[int][]string) (vals, hists map[int][]any, err error) {
	vc := make(map[int]*redis.SliceCmd, len(refs))
	hc := make(map[int]*redis.SliceCmd, len(refs))
	var ks []string
	_, err = b.client.Pipelined(ctx, func(pipe redis.Pipeliner) error {
		for p, ids := range refs {
			k := &b.parts[p]
			ks = append(ks, k.entries, k.history)
			vc[p] = pipe.HMGet(ctx, k.entries, ids...)
			hc[p] = pipe.HMGet(ctx, k.history, ids...)
		}
		return nil
	})
	if err != nil {
		return nil, nil, b.mapErr(ctx, op, err, ks...)
	}
	vals, hists = make(map[int][]any, len(refs)), make(map[int][]any, len(refs))
	for p := range refs {
		vals[p], hists[p] = vc[p].Val(), hc[p].Val()
	}
	return vals, hists, nil
}

// pendingInfos reads the entries of rows (one pipeline) and reports each
// as Lookup does, in the order of rows; nil for one that is gone or is no
// longer the value the row was read from.
func (b *Backend) pendingInfos(ctx context.Context, op string, rows []*pendingRow) ([]*outbox.EntryInfo, error) {
	refs := map[int][]string{}
	at := make([]int, len(rows)) // index of row i in refs[rows[i].p]
	for i, r := range rows {
		at[i] = len(refs[r.p])
		refs[r.p] = append(refs[r.p], r.id)
	}
	vals, hists, err := b.readValues(ctx, op, refs)
	if err != nil {
		return nil, err
	}
	out := make([]*outbox.EntryInfo, len(rows))
	for i, r := range rows {
		raw, _ := vals[r.p][at[i]].(string)
		hist, _ := hists[r.p][at[i]].(string)
		if len(raw) < 9 || int64(beUint64(raw[1:9])) != r.seq {
			continue // sent, cancelled or changed since the scan
		}
		e, err := decodeEntry(r.id, r.p, []byte(raw))
		if err != nil {
			continue
		}
		info := &outbox.EntryInfo{Entry: e, DueAt: time.UnixMilli(r.due()), Deferred: r.deferred}
		info.History, _ = decodeHistory(hist)
		out[i] = info
	}
	return out, nil
}

// beUint64 reads 8 big-endian bytes.
func beUint64(s string) uint64 {
	var v uint64
	for i := 0; i < 8; i++ {
		v = v<<8 | uint64(s[i])
	}
	return v
}

// timeMicro is Unix µs as a time (zero for 0).
func timeMicro(us int64) time.Time {
	if us == 0 {
		return time.Time{}
	}
	return time.UnixMicro(us)
}
