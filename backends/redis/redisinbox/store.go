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
	// failover client): its transactions need no anchor WATCH, which
	// saves a round trip.
	single *redis.Client
	k      keys
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
// the master of the inbox's slot, found by WATCHing the anchor key, which
// is never written: one round trip), calls fn with a [Tx], and when fn
// returns nil sends the queued writes with MULTI/EXEC (one round trip;
// none when nothing was queued). When fn returns an error or panics,
// nothing queued is sent, the WATCHes are released, and fn's error is
// returned (the panic re-raised). A WATCHed key written by another client
// before EXEC fails the commit with an error for which [Store.Retryable]
// is true; a command that fails at run time inside EXEC gives an
// [*ExecError] (the rest was applied). InTx does not retry.
func (s *Store) InTx(ctx context.Context, fn func(ctx context.Context, tx *Tx) error) error {
	entered := false
	var fnErr error
	run := func(rtx *redis.Tx) error {
		entered = true
		tx := &Tx{s: s, rtx: rtx, pipe: rtx.TxPipeline()}
		defer tx.finish(ctx)
		if fnErr = fn(ctx, tx); fnErr != nil {
			return fnErr
		}
		return tx.commit(ctx)
	}
	var err error
	if s.single != nil {
		err = s.single.Watch(ctx, run)
	} else {
		err = s.client.Watch(ctx, run, s.k.anchor)
	}
	if !entered {
		return wrap(ctx, "InTx: WATCH of the anchor key", err)
	}
	return err // fn's error as it returned it, or commit's, mapped by execErr
}

// Retryable implements [inbox.Store]: it is true for a commit that failed
// because a WATCHed key changed (go-redis's redis.TxFailedErr, wrapped),
// false for every other error, nil and context errors.
func (s *Store) Retryable(err error) bool {
	return err != nil && errors.Is(err, redis.TxFailedErr) && !isContext(err)
}

// Record implements [inbox.Store], in one round trip: it WATCHes the ID
// keys ("<prefix>:id:<id>") and reads them (MGET), with TIME when the
// transaction has no time yet, then queues, for each new ID, SET of its
// key (value: the server time in ms) and one ZADD of the new IDs to
// "<prefix>:ids" (score: that time) for Purge. Two transactions recording
// the same ID concurrently both get true; the second EXEC fails with a
// retryable error, as its WATCH saw the first one's SET.
func (s *Store) Record(ctx context.Context, tx *Tx, ids []string) ([]bool, error) {
	if err := tx.check(s); err != nil {
		return nil, err
	}
	if len(ids) == 0 {
		return nil, nil
	}
	if slices.Contains(ids, "") {
		return nil, fmt.Errorf("redisinbox: Record got an empty ID: %w", inbox.ErrInvalidMessage)
	}
	keys := make([]string, len(ids))
	for i, id := range ids {
		keys[i] = s.k.id(id)
	}
	var (
		mget *redis.SliceCmd
		tm   *redis.TimeCmd
	)
	_, err := tx.rtx.Pipelined(ctx, func(p redis.Pipeliner) error {
		tx.watch(ctx, p, keys)
		mget = p.MGet(ctx, keys...)
		if tx.nowMS == 0 {
			tm = p.Time(ctx)
		}
		return nil
	})
	if err != nil {
		return nil, wrap(ctx, "Record", err)
	}
	if tm != nil {
		tx.setNow(tm.Val())
	}
	vals := mget.Val()
	if len(vals) != len(ids) {
		return nil, fmt.Errorf("redisinbox: Record: MGET of %d keys returned %d values", len(ids), len(vals))
	}
	if tx.recorded == nil {
		tx.recorded = make(map[string]bool, len(ids))
	}
	fresh := make([]bool, len(ids))
	var members []redis.Z
	for i, id := range ids {
		if vals[i] != nil || tx.recorded[id] {
			continue
		}
		fresh[i] = true
		tx.recorded[id] = true
		tx.pipe.Set(ctx, keys[i], tx.nowMS, 0)
		members = append(members, redis.Z{Score: float64(tx.nowMS), Member: id})
	}
	if len(members) > 0 {
		tx.pipe.ZAdd(ctx, s.k.ids, members...)
	}
	return fresh, nil
}

// KeySeqs implements [inbox.Store], in one round trip (none for no keys):
// it WATCHes the keys' "<prefix>:seq:<key>" and reads them (MGET), so a
// concurrent transaction that sets one of them first makes this one's
// commit fail with a retryable error. A value that is not an integer is
// an error naming the key.
func (s *Store) KeySeqs(ctx context.Context, tx *Tx, keys []string) (map[string]int64, error) {
	if err := tx.check(s); err != nil {
		return nil, err
	}
	out := make(map[string]int64, len(keys))
	if len(keys) == 0 {
		return out, nil
	}
	rkeys := make([]string, len(keys))
	for i, k := range keys {
		rkeys[i] = s.k.seq(k)
	}
	var mget *redis.SliceCmd
	_, err := tx.rtx.Pipelined(ctx, func(p redis.Pipeliner) error {
		tx.watch(ctx, p, rkeys)
		mget = p.MGet(ctx, rkeys...)
		return nil
	})
	if err != nil {
		return nil, wrap(ctx, "KeySeqs", err)
	}
	for i, v := range mget.Val() {
		if v == nil {
			continue
		}
		str, _ := v.(string)
		n, err := strconv.ParseInt(str, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("redisinbox: KeySeqs: the key %q holds %q, but the inbox keeps a key's sequence number there as an integer: something other than redisinbox wrote it; delete it (DEL %s) and the key's next message is taken as its first", rkeys[i], str, rkeys[i])
		}
		out[keys[i]] = n
	}
	return out, nil
}

// SetKeySeqs implements [inbox.Store]: it queues SET of each key's
// "<prefix>:seq:<key>" and one ZADD to "<prefix>:seqs" (score: the
// transaction's server time in ms; reading it costs one round trip if
// Record did not run first).
func (s *Store) SetKeySeqs(ctx context.Context, tx *Tx, seqs map[string]int64) error {
	if err := tx.check(s); err != nil {
		return err
	}
	if len(seqs) == 0 {
		return nil
	}
	now, err := tx.now(ctx)
	if err != nil {
		return wrap(ctx, "SetKeySeqs: TIME", err)
	}
	keys := make([]string, 0, len(seqs))
	for k := range seqs {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	members := make([]redis.Z, len(keys))
	for i, k := range keys {
		tx.pipe.Set(ctx, s.k.seq(k), seqs[k], 0)
		members[i] = redis.Z{Score: float64(now), Member: k}
	}
	tx.pipe.ZAdd(ctx, s.k.seqs, members...)
	return nil
}

// SaveOffsets implements [inbox.Store]: it queues one HSET of
// "<prefix>:offsets", a field per partition (see "# Keys" in the package
// doc), the next offset its value.
func (s *Store) SaveOffsets(ctx context.Context, tx *Tx, offsets []inbox.Offset) error {
	if err := tx.check(s); err != nil {
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

// Offsets implements [inbox.Store], in one round trip: HGETALL of
// "<prefix>:offsets", keeping group and topic's fields. (The hash holds a
// field per partition of every group and topic of the inbox, which
// consumers have in the tens or hundreds.)
func (s *Store) Offsets(ctx context.Context, group, topic string) (map[int32]int64, error) {
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
