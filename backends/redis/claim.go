package redisoutbox

import (
	"context"
	"fmt"

	"github.com/outboxrelay/outbox"
)

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
// over their pending members without reading their values, or starts
// behind them when the front hint holds (docs/redis.md, "Fetching
// ahead"), and the keys of the attempted ones are held back from the
// start. A never-attempted entry of inFlight holds back its key's later
// entries only when the partition's key-order set holds its member (an
// entry once held back or converted from format 1); they come with the
// next fetch.
func (b *Backend) FetchNext(ctx context.Context, lease outbox.Lease, limit int, inFlight []outbox.Entry) (outbox.Batch, error) {
	if inFlight == nil {
		inFlight = []outbox.Entry{}
	}
	return b.fetch(ctx, "FetchNext", lease, limit, inFlight)
}

// fetch runs claim.lua for FetchBatch, FindPendingBatch and (with a
// non-nil inFlight) FetchNext, remembers what the front hint and MarkSent
// need of its result, and parks what Go's decoder refuses of it (see
// quarantine).
func (b *Backend) fetch(ctx context.Context, op string, lease outbox.Lease, limit int, inFlight []outbox.Entry) (outbox.Batch, error) {
	if err := b.check(ctx); err != nil {
		return outbox.Batch{}, err
	}
	if err := outbox.CheckFetch(len(b.parts), lease, limit); err != nil {
		return outbox.Batch{}, argErr(op, err)
	}
	claimed, hinted, err := b.claim(ctx, op, lease, limit, inFlight)
	if err != nil {
		return outbox.Batch{}, err
	}
	batch := outbox.Batch{Parked: claimed.parked}
	dec := b.decodeClaimed(lease.Partition, claimed.flat)
	batch.Entries = dec.entries
	b.claims[lease.Partition].Remember(lease, dec.members)
	front := &b.fronts[lease.Partition]
	if hinted {
		front.held(claimed.hinted)
	}
	gen := claimed.gen
	if dec.refused != nil {
		gen = "" // what is quarantined leaves the stretch the hint describes
	}
	front.remember(lease, gen, claimed.lscore, batch.Entries, dec.members)
	if dec.refused != nil {
		parked, err := b.quarantine(ctx, op, lease, dec.pairs, dec.refused)
		if err != nil {
			return outbox.Batch{}, err
		}
		batch.Parked = append(batch.Parked, parked...)
	}
	return batch, nil
}

// claim runs claim.lua once, or twice when a front hint sent alone did not
// hold (then with the entries in flight, and with them next time, see
// frontSlot); hinted reports whether the call that answered carried a
// front hint.
func (b *Backend) claim(ctx context.Context, op string, lease outbox.Lease, limit int, inFlight []outbox.Entry) (c claimed, hinted bool, err error) {
	ks := claimKeys(&b.parts[lease.Partition])
	front := &b.fronts[lease.Partition]
	args := b.claimArgs(lease, limit, inFlight)
	res, err := scriptClaim.Run(ctx, b.client, ks, args.argv()...).Result()
	if code, ok := res.(int64); ok && code == codeHintRefused && err == nil {
		// The hint went without the entries in flight and did not hold:
		// claim again with them.
		front.held(false)
		args = b.claimArgs(lease, limit, inFlight)
		res, err = scriptClaim.Run(ctx, b.client, ks, args.argv()...).Result()
	}
	if err != nil {
		return claimed{}, false, b.mapErr(ctx, op, err, ks...)
	}
	c, err = b.parseClaim(ctx, op, lease, res)
	return c, args.hint.gen != "", err
}

// claimKeys is claim.lua's KEYS for the partition of k.
func claimKeys(k *keys) []string {
	return []string{k.lease, k.pending, k.entries, k.keyorder, k.parked, k.hold, k.seq, k.paused, k.history, k.parkedat}
}

// claimArgs is claim.lua's ARGV, built in one place. The script's header
// documents the same layout, and claimargs_test.go parses that header and
// checks fields against it.
type claimArgs struct {
	token  string // the lease's token
	limit  int    // at most this many entries returned and parked
	budget int    // at most this many pending members scanned
	// fetchNext: the call is a FetchNext, so the fields below are sent
	// (also when empty); FindPendingBatch and FetchBatch send none.
	fetchNext bool
	hint      hintArgs // the front hint (gen "" for none)
	members   []string // the pending members of entries in flight
	ids       []string // the IDs of the entries in flight without a member
	stopped   []string // the keys of the attempted entries in flight
}

// claimArgField is one named part of claim.lua's ARGV, named as the
// script's header names it.
type claimArgField struct {
	name   string
	values []any
}

// fields returns ARGV part by part, in order.
func (a *claimArgs) fields() []claimArgField {
	f := []claimArgField{
		{"token", []any{a.token}},
		{"limit", []any{a.limit}},
		{"budget", []any{a.budget}},
	}
	if !a.fetchNext {
		return f
	}
	h := &a.hint
	return append(f,
		claimArgField{"gen", []any{h.gen}},
		claimArgField{"first", []any{h.first}},
		claimArgField{"last", []any{h.last}},
		claimArgField{"count", []any{h.count}},
		claimArgField{"lscore", []any{h.lscore}},
		claimArgField{"m", []any{len(a.members)}},
		claimArgField{"members", anys(a.members)},
		claimArgField{"n", []any{len(a.ids)}},
		claimArgField{"ids", anys(a.ids)},
		claimArgField{"stopped", anys(a.stopped)},
	)
}

// argv returns ARGV as the script takes it.
func (a *claimArgs) argv() []any {
	fs := a.fields()
	n := 0
	for _, f := range fs {
		n += len(f.values)
	}
	out := make([]any, 0, n)
	for _, f := range fs {
		out = append(out, f.values...)
	}
	return out
}

// claimArgs returns claim.lua's arguments for a fetch of up to limit
// entries under lease; with a non-nil inFlight, a FetchNext's: the front
// hint (see frontSlot), then, unless the hint goes alone, the pending
// members the partition's last two fetches under lease returned those
// entries under (the IDs of the others), and the keys of the attempted
// ones.
func (b *Backend) claimArgs(lease outbox.Lease, limit int, inFlight []outbox.Entry) claimArgs {
	a := claimArgs{token: token(lease), limit: limit, budget: 2*limit + 256 + len(inFlight), fetchNext: inFlight != nil}
	if inFlight == nil {
		return a
	}
	var alone bool
	a.hint, alone = b.fronts[lease.Partition].hint(lease, inFlight)
	for i := range inFlight {
		if e := &inFlight[i]; e.Attempts > 0 && e.Key != "" {
			a.stopped = append(a.stopped, e.Key)
		}
	}
	if alone || len(inFlight) == 0 {
		return a
	}
	ids := make([]string, len(inFlight))
	for i := range inFlight {
		ids[i] = inFlight[i].ID
	}
	b.claims[lease.Partition].Each(lease, ids, func(id, member string, ok bool) {
		if ok {
			a.members = append(a.members, member)
		} else {
			a.ids = append(a.ids, id)
		}
	})
	return a
}

// claimed is claim.lua's result: the flat id, value pairs it returned,
// the entries it parked, the generation and last score its entries give
// as a front hint ("" for none), and whether the front hint it was sent
// held.
type claimed struct {
	flat        []any
	parked      []outbox.CorruptEntry
	gen, lscore string
	hinted      bool
}

// parseClaim reads claim.lua's result, or maps its result code.
func (b *Backend) parseClaim(ctx context.Context, op string, lease outbox.Lease, res any) (claimed, error) {
	if code, ok := res.(int64); ok {
		return claimed{}, b.mapErr(ctx, op, scriptCode{code, lease})
	}
	five, ok := res.([]any)
	if !ok || len(five) != 5 {
		return claimed{}, fmt.Errorf("redisoutbox: %s: unexpected script result %T", op, res)
	}
	flat, ok1 := five[0].([]any)
	parked, ok2 := five[1].([]any)
	gen, ok3 := five[2].(string)
	lscore, ok4 := five[3].(string)
	hinted, ok5 := five[4].(int64)
	if !ok1 || !ok2 || !ok3 || !ok4 || !ok5 || len(flat)%2 != 0 || len(parked)%4 != 0 {
		return claimed{}, fmt.Errorf("redisoutbox: %s: unexpected script result %v", op, res)
	}
	return claimed{flat: flat, parked: corruptEntries(parked), gen: gen, lscore: lscore, hinted: hinted == 1}, nil
}

// corruptEntries reads a script's flat id, key, topic, reason report of
// the entries it parked.
func corruptEntries(flat []any) []outbox.CorruptEntry {
	var out []outbox.CorruptEntry
	for i := 0; i+3 < len(flat); i += 4 {
		var f [4]string
		for j := range f {
			f[j], _ = flat[i+j].(string)
		}
		out = append(out, outbox.CorruptEntry{ID: f[0], Key: f[1], Topic: f[2], Reason: f[3]})
	}
	return out
}

// decoded is what Go made of a claim's entries: those it decoded, the
// pending member of each format 2 entry by ID, and those it refused (with
// the member, ID pairs of the refused format 2 ones).
type decoded struct {
	entries []outbox.Entry
	members map[string]string
	refused []refusal
	pairs   []any
}

// decodeClaimed decodes the flat id, value pairs a claim of partition
// returned, in order.
func (b *Backend) decodeClaimed(partition int, flat []any) decoded {
	d := decoded{
		entries: make([]outbox.Entry, 0, len(flat)/2),
		members: make(map[string]string, len(flat)/2),
	}
	for i := 0; i < len(flat); i += 2 {
		id, _ := flat[i].(string)
		raw, _ := flat[i+1].(string)
		var m string
		if len(raw) > 9 && raw[0] == encodingV2 {
			m = raw[1:9] + id
			d.members[id] = m
		}
		e, err := decodeEntry(id, partition, bytesOf(raw))
		if err == nil && e.Topic == "" {
			err = fmt.Errorf("%w: topic is empty", errCorrupt)
		}
		if err != nil {
			// The claim's fast path returns a format 2 value unchecked past
			// its attempts (claim.lua): quarantine.lua parks it.
			d.refused = append(d.refused, refusal{id: id, e: e, err: err})
			if m != "" {
				d.pairs = append(d.pairs, m, id)
			}
			continue
		}
		d.entries = append(d.entries, e)
	}
	return d
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
	out, done, err := b.quarantineMalformed(ctx, op, lease, pairs)
	if err != nil {
		return nil, err
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

// quarantineMalformed runs quarantine.lua for pairs (pending member, ID):
// it reports the entries the script parked, and done: those it parked or
// found no longer pending under the member the claim returned them under
// (nothing to park). No pairs: no round trip.
func (b *Backend) quarantineMalformed(ctx context.Context, op string, lease outbox.Lease, pairs []any) ([]outbox.CorruptEntry, map[string]bool, error) {
	done := map[string]bool{}
	if len(pairs) == 0 {
		return nil, done, nil
	}
	k := &b.parts[lease.Partition]
	ks := []string{k.lease, k.pending, k.entries, k.parked, k.parkedat}
	res, err := scriptQuarantine.Run(ctx, b.client, ks, append([]any{token(lease)}, pairs...)...).Result()
	if err != nil {
		return nil, nil, b.mapErr(ctx, op, err, ks...)
	}
	if code, ok := res.(int64); ok {
		return nil, nil, b.mapErr(ctx, op, scriptCode{code, lease})
	}
	two, ok := res.([]any)
	if !ok || len(two) != 2 {
		return nil, nil, fmt.Errorf("redisoutbox: %s: unexpected quarantine result %T", op, res)
	}
	parked, ok1 := two[0].([]any)
	sound, ok2 := two[1].([]any)
	if !ok1 || !ok2 || len(parked)%4 != 0 {
		return nil, nil, fmt.Errorf("redisoutbox: %s: unexpected quarantine result %v", op, res)
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
	return corruptEntries(parked), done, nil
}
