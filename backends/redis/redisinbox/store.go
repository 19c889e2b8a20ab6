package redisinbox

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/outboxrelay/outbox/inbox"
)

// Store is the Redis inbox store: an [inbox.Store] whose transactions are
// a MULTI/EXEC guarded by WATCH, on a single node, Sentinel (a failover
// client) or Redis Cluster. It is safe for concurrent use, each
// transaction on a connection of its own; it holds no resources besides
// the client, which the caller closes.
type Store struct {
	client redis.UniversalClient
	// single is client when it is a *redis.Client (a single node or a
	// failover client), cluster when it is a *redis.ClusterClient: their
	// transactions take a connection without the anchor WATCH, which
	// saves a round trip (see InTx).
	single  *redis.Client
	cluster *redis.ClusterClient
	slot    int // the Cluster slot of the prefix's hash tag
	k       keys
}

var _ inbox.Store[*Tx] = (*Store)(nil)

// New returns the inbox store at opts.Prefix on client (a *redis.Client,
// *redis.ClusterClient, failover client or any redis.UniversalClient). It
// does no I/O and creates no key: an inbox's keys appear with its first
// transaction. It fails for a nil client or a prefix without exactly one
// hash tag (an error wrapping [inbox.ErrInvalidArgument]).
//
// Run the server with maxmemory-policy noeviction (the inbox's keys have
// no TTL, so volatile-* policies do not evict them either): an evicted
// record lets a redelivered message be applied again.
func New(client redis.UniversalClient, opts Options) (*Store, error) {
	if client == nil {
		return nil, fmt.Errorf("redisinbox: New: client is nil; pass a *redis.Client, *redis.ClusterClient or any redis.UniversalClient: %w", inbox.ErrInvalidArgument)
	}
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	s := &Store{client: client, k: newKeys(opts.Prefix)}
	s.single, _ = client.(*redis.Client)
	s.cluster, _ = client.(*redis.ClusterClient)
	s.slot = slotOf(s.k.tag)
	return s, nil
}

// Prefix returns the store's key prefix (Options.Prefix after defaults).
func (s *Store) Prefix() string { return s.k.prefix }

// HashTag returns the hash tag of the store's prefix, braces included
// ("{inbox}"): a key that contains it is in the inbox's Redis Cluster
// slot, as every key a transaction's handler queues or watches must be.
func (s *Store) HashTag() string { return s.k.tag }

// Key returns Prefix()+":"+suffix, a key in the inbox's slot for the
// handler's effects. The inbox keeps its own keys under the same prefix:
// suffix must not be "ids", "seqs", "offsets" or "anchor", nor start with
// "id:" or "seq:". Any other key containing [Store.HashTag] does as well.
func (s *Store) Key(suffix string) string { return s.k.prefix + ":" + suffix }

// checkTags refuses, on Redis Cluster, keys outside the inbox's slot
// (the server would refuse them at EXEC, less clearly).
func (s *Store) checkTags(keys []string) error {
	if s.single != nil {
		return nil
	}
	for _, k := range keys {
		if tagOf(k) != s.k.tag {
			return fmt.Errorf("redisinbox: the key %q does not carry the inbox's hash tag %s, so on Redis Cluster it is in another slot than the transaction; build it with Store.Key or put %s in it: %w", k, s.k.tag, s.k.tag, inbox.ErrInvalidArgument)
		}
	}
	return nil
}

// InTx implements [inbox.Store]: it takes a connection (on Cluster, one to
// the master of the inbox's slot in go-redis's slot map; through any
// other redis.UniversalClient, such as a Ring, by WATCHing the anchor key,
// which is never written: one round trip), calls fn with a [Tx], and when fn
// returns nil sends the queued writes with MULTI/EXEC (one round trip;
// none when nothing was queued). When fn returns an error or panics,
// nothing queued is sent, the WATCHes are released, and fn's error is
// returned (the panic re-raised). A WATCHed key written by another client
// before EXEC fails the commit with an error for which [Store.Retryable]
// is true; a command that fails at run time inside EXEC gives an
// [*ExecError] (the rest was applied). InTx does not retry.
func (s *Store) InTx(ctx context.Context, fn func(ctx context.Context, tx *Tx) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	entered := false // a connection was taken: every error from here on is fn's or the commit's
	run := func(rtx *redis.Tx) error {
		entered = true
		tx := &Tx{s: s, rtx: rtx, pipe: rtx.TxPipeline()}
		defer tx.finish(ctx)
		if err := fn(ctx, tx); err != nil {
			return err
		}
		return tx.commit(ctx)
	}
	var err error
	switch {
	case s.single != nil:
		err = s.single.Watch(ctx, run)
	case s.cluster != nil:
		// go-redis's ClusterClient.Watch would WATCH a key to find the
		// node, a round trip; its slot map finds it without one. A slot
		// that moved since is answered MOVED at the first command, which
		// s.wrap turns into a retryable error (and a reload of the map).
		var node *redis.Client
		if node, err = s.cluster.MasterForKey(ctx, s.k.anchor); err == nil {
			err = node.Watch(ctx, run)
		}
	default:
		err = s.client.Watch(ctx, run, s.k.anchor)
	}
	if !entered {
		return s.wrap(ctx, "InTx: taking a connection", err)
	}
	return err // fn's error as it returned it, or commit's, mapped by execErr
}

// Retryable implements [inbox.Store]: it is true for a commit that failed
// because a WATCHed key changed (go-redis's redis.TxFailedErr, wrapped)
// and, on Cluster, for a transaction refused because the inbox's slot
// moved to another master (MOVED or ASK of that slot, during a resharding
// or after a failover; go-redis's slot map is reloaded meanwhile). It is
// false for every other error, nil and context errors.
func (s *Store) Retryable(err error) bool {
	return err != nil && (errors.Is(err, redis.TxFailedErr) || errors.Is(err, errSlotMoved)) && !isContext(err)
}

// Record implements [inbox.Store], in one round trip: it WATCHes the ID
// keys ("<prefix>:id:<id>") and reads them (MGET), with TIME when the
// transaction has no time yet, then queues one MSET of the new IDs' keys
// (value: the server time in ms) and one ZADD of the new IDs to
// "<prefix>:ids" (score: that time) for Purge. Two transactions recording
// the same ID concurrently both get true; the second EXEC fails with a
// retryable error, as its WATCH saw the first one's SET.
func (s *Store) Record(ctx context.Context, tx *Tx, ids []string) ([]bool, error) {
	fresh, _, err := s.read(ctx, "Record", tx, ids, nil)
	return fresh, err
}

// KeySeqs implements [inbox.Store], in one round trip (none for no keys):
// it WATCHes the keys' "<prefix>:seq:<key>" and reads them (MGET), so a
// concurrent transaction that sets one of them first makes this one's
// commit fail with a retryable error. A value that is not an integer is
// an error naming the key.
func (s *Store) KeySeqs(ctx context.Context, tx *Tx, keys []string) (map[string]int64, error) {
	_, seqs, err := s.read(ctx, "KeySeqs", tx, nil, keys)
	return seqs, err
}

// RecordWithKeySeqs is Record(ctx, tx, ids) then KeySeqs(ctx, tx, keys),
// with the same answers and guards, in one round trip (the inbox's
// optional KeyRecorder interface, which inbox.Inbox uses for a batch with
// numbered messages): one pipeline WATCHes and reads both kinds of keys.
// No ids returns no answers; no keys returns an empty map.
func (s *Store) RecordWithKeySeqs(ctx context.Context, tx *Tx, ids, keys []string) ([]bool, map[string]int64, error) {
	return s.read(ctx, "RecordWithKeySeqs", tx, ids, keys)
}

// read is the one round trip of Record, KeySeqs and RecordWithKeySeqs
// (op): it WATCHes and reads (MGET) the keys of ids and the number keys of
// keys, with TIME when ids are recorded and the transaction has no time
// yet; then it queues the records of the new IDs in the MULTI and returns
// the answers for ids (nil for none) and the numbers of keys (empty for
// none). With neither it sends nothing.
func (s *Store) read(ctx context.Context, op string, tx *Tx, ids, keys []string) ([]bool, map[string]int64, error) {
	if err := tx.check(ctx, s); err != nil {
		return nil, nil, err
	}
	if slices.Contains(ids, "") {
		return nil, nil, fmt.Errorf("redisinbox: %s got an empty ID: %w", op, inbox.ErrInvalidMessage)
	}
	seqs := make(map[string]int64, len(keys))
	if len(ids) == 0 && len(keys) == 0 {
		return nil, seqs, nil
	}
	idKeys, seqKeys := make([]string, len(ids)), make([]string, len(keys))
	for i, id := range ids {
		idKeys[i] = s.k.id(id)
	}
	for i, k := range keys {
		seqKeys[i] = s.k.seq(k)
	}
	var (
		idVals, seqVals *redis.SliceCmd
		tm              *redis.TimeCmd
	)
	_, err := tx.rtx.Pipelined(ctx, func(p redis.Pipeliner) error {
		tx.watch(ctx, p, append(slices.Clip(idKeys), seqKeys...))
		if len(ids) > 0 {
			idVals = p.MGet(ctx, idKeys...)
			if tx.nowMS == 0 {
				tm = p.Time(ctx)
			}
		}
		if len(keys) > 0 {
			seqVals = p.MGet(ctx, seqKeys...)
		}
		return nil
	})
	if err != nil {
		return nil, nil, s.wrap(ctx, op, err)
	}
	if tm != nil {
		tx.setNow(tm.Val())
	}
	if seqVals != nil {
		if err := parseSeqs(op, keys, seqKeys, seqVals.Val(), seqs); err != nil {
			return nil, nil, err
		}
	}
	if idVals == nil {
		return nil, seqs, nil
	}
	fresh, err := s.queueRecords(ctx, op, tx, ids, idKeys, idVals.Val())
	return fresh, seqs, err
}

// queueRecords answers, for each of ids, whether it is new (its key, read
// as vals, is absent, and no earlier Record of tx took it), and queues the
// new ones' records: one MSET of their keys and one ZADD to the ids set.
func (s *Store) queueRecords(ctx context.Context, op string, tx *Tx, ids, idKeys []string, vals []any) ([]bool, error) {
	if len(vals) != len(ids) {
		return nil, fmt.Errorf("redisinbox: %s: MGET of %d keys returned %d values", op, len(ids), len(vals))
	}
	if tx.recorded == nil {
		tx.recorded = make(map[string]bool, len(ids))
	}
	fresh := make([]bool, len(ids))
	var (
		pairs   []any
		members []redis.Z
	)
	for i, id := range ids {
		if vals[i] != nil || tx.recorded[id] {
			continue
		}
		fresh[i] = true
		tx.recorded[id] = true
		pairs = append(pairs, idKeys[i], tx.nowMS)
		members = append(members, redis.Z{Score: float64(tx.nowMS), Member: id})
	}
	if len(members) > 0 {
		tx.pipe.MSet(ctx, pairs...)
		tx.pipe.ZAdd(ctx, s.k.ids, members...)
	}
	return fresh, nil
}

// parseSeqs puts into seqs the numbers of keys read (MGET of seqKeys) as
// vals; an absent key stays absent.
func parseSeqs(op string, keys, seqKeys []string, vals []any, seqs map[string]int64) error {
	if len(vals) != len(keys) {
		return fmt.Errorf("redisinbox: %s: MGET of %d keys returned %d values", op, len(keys), len(vals))
	}
	for i, v := range vals {
		if v == nil {
			continue
		}
		str, _ := v.(string)
		n, err := strconv.ParseInt(str, 10, 64)
		if err != nil {
			return fmt.Errorf("redisinbox: %s: the key %q holds %q, but the inbox keeps a key's sequence number there as an integer: something other than redisinbox wrote it; delete it (DEL %s) and the key's next message is taken as its first", op, seqKeys[i], str, seqKeys[i])
		}
		seqs[keys[i]] = n
	}
	return nil
}

// SetKeySeqs implements [inbox.Store]: it queues one MSET of the keys'
// "<prefix>:seq:<key>" and one ZADD to "<prefix>:seqs" (score: the
// transaction's server time in ms; reading it costs one round trip if
// Record did not run first).
func (s *Store) SetKeySeqs(ctx context.Context, tx *Tx, seqs map[string]int64) error {
	if err := tx.check(ctx, s); err != nil {
		return err
	}
	if len(seqs) == 0 {
		return nil
	}
	now, err := tx.now(ctx)
	if err != nil {
		return s.wrap(ctx, "SetKeySeqs: TIME", err)
	}
	keys := make([]string, 0, len(seqs))
	for k := range seqs {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	pairs := make([]any, 0, 2*len(keys))
	members := make([]redis.Z, len(keys))
	for i, k := range keys {
		pairs = append(pairs, s.k.seq(k), seqs[k])
		members[i] = redis.Z{Score: float64(now), Member: k}
	}
	tx.pipe.MSet(ctx, pairs...)
	tx.pipe.ZAdd(ctx, s.k.seqs, members...)
	return nil
}

// SaveOffsets implements [inbox.Store]: it queues one HSET of
// "<prefix>:offsets", a field per partition (see "# Keys" in the package
// doc), the next offset its value.
func (s *Store) SaveOffsets(ctx context.Context, tx *Tx, offsets []inbox.Offset) error {
	if err := tx.check(ctx, s); err != nil {
		return err
	}
	if len(offsets) == 0 {
		return nil
	}
	args := make([]any, 0, 2*len(offsets))
	for _, o := range offsets {
		args = append(args, offsetField(o.Group, o.Topic, o.Partition), o.Next)
	}
	tx.pipe.HSet(ctx, s.k.offsets, args...)
	return nil
}

// Finish is SetKeySeqs(ctx, tx, seqs) then SaveOffsets(ctx, tx, offsets)
// (the inbox's optional Finisher interface): both only queue writes in the
// MULTI, so it sends nothing (but TIME, when the transaction has no time
// yet and seqs is not empty). Either may be empty.
func (s *Store) Finish(ctx context.Context, tx *Tx, seqs map[string]int64, offsets []inbox.Offset) error {
	if err := s.SetKeySeqs(ctx, tx, seqs); err != nil {
		return err
	}
	return s.SaveOffsets(ctx, tx, offsets)
}

// Offsets implements [inbox.Store], in one round trip: HGETALL of
// "<prefix>:offsets", keeping group and topic's fields. (The hash holds a
// field per partition of every group and topic of the inbox, which
// consumers have in the tens or hundreds.)
func (s *Store) Offsets(ctx context.Context, group, topic string) (map[int32]int64, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	all, err := s.client.HGetAll(ctx, s.k.offsets).Result()
	if err != nil {
		return nil, wrap(ctx, "Offsets", err)
	}
	out := map[int32]int64{}
	for field, v := range all {
		p, ok := offsetPartition(field, group, topic)
		if !ok {
			continue
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("redisinbox: Offsets: the field %q of %q holds %q, not an offset: something other than redisinbox wrote it; set it to the partition's next offset (HSET %s <field> <offset>)", field, s.k.offsets, v, s.k.offsets)
		}
		out[p] = n
	}
	return out, nil
}

// Purge implements [inbox.Store] in two round trips: ZRANGE BYSCORE of
// "<prefix>:ids" and "<prefix>:seqs" below before (oldest first, at most
// limit of each), then purge.lua, which removes each candidate (its
// string key and its member) after checking, atomically, that its score
// is still below before. Nothing is ever blocked; a transaction that
// WATCHed a record Purge removes fails its commit with a retryable error
// and, run again, finds the record gone.
func (s *Store) Purge(ctx context.Context, before time.Time, limit int) (ids, keys int, err error) {
	if limit < 1 {
		return 0, 0, fmt.Errorf("redisinbox: Purge limit %d, want at least 1: %w", limit, inbox.ErrInvalidArgument)
	}
	if err := ctx.Err(); err != nil {
		return 0, 0, err
	}
	ms := before.UnixMilli()
	rng := func(key string) *redis.ZRangeArgs {
		return &redis.ZRangeArgs{Key: key, ByScore: true, Start: "-inf", Stop: "(" + strconv.FormatInt(ms, 10), Count: int64(limit)}
	}
	var oldIDs, oldKeys *redis.StringSliceCmd
	_, err = s.client.Pipelined(ctx, func(p redis.Pipeliner) error {
		oldIDs = p.ZRangeArgs(ctx, *rng(s.k.ids))
		oldKeys = p.ZRangeArgs(ctx, *rng(s.k.seqs))
		return nil
	})
	if err != nil {
		return 0, 0, wrap(ctx, "Purge", err)
	}
	idList, keyList := oldIDs.Val(), oldKeys.Val()
	if len(idList) == 0 && len(keyList) == 0 {
		return 0, 0, nil
	}
	rkeys := make([]string, 0, 2+len(idList)+len(keyList))
	args := make([]any, 0, 2+len(idList)+len(keyList))
	rkeys = append(rkeys, s.k.ids, s.k.seqs)
	args = append(args, ms, len(idList))
	for _, id := range idList {
		rkeys = append(rkeys, s.k.id(id))
		args = append(args, id)
	}
	for _, k := range keyList {
		rkeys = append(rkeys, s.k.seq(k))
		args = append(args, k)
	}
	res, err := scriptPurge.Run(ctx, s.client, rkeys, args...).Int64Slice()
	if err != nil {
		return 0, 0, wrap(ctx, "Purge", err)
	}
	if len(res) != 2 {
		return 0, 0, fmt.Errorf("redisinbox: Purge: purge.lua returned %v, want two counts", res)
	}
	return int(res[0]), int(res[1]), nil
}
