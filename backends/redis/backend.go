package redisoutbox

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/outboxrelay/outbox"
	"github.com/outboxrelay/outbox/internal/lastfetch"
)

// Compile-time checks of the interfaces Backend implements.
var (
	_ outbox.Backend[redis.Pipeliner] = (*Backend)(nil)
	_ outbox.Notifier                 = (*Backend)(nil)
	_ outbox.Canceler                 = (*Backend)(nil)
	_ outbox.Inspector                = (*Backend)(nil)
	_ outbox.Membership               = (*Backend)(nil)
	_ outbox.PartitionInspector       = (*Backend)(nil)
	_ outbox.Looker                   = (*Backend)(nil)
	_ outbox.BatchFetcher             = (*Backend)(nil)
	_ outbox.Prefetcher               = (*Backend)(nil)
	_ outbox.Exporter                 = (*Backend)(nil)
	_ outbox.Importer                 = (*Backend)(nil)
	_ outbox.Holder                   = (*Backend)(nil)
	_ outbox.Sealer                   = (*Backend)(nil)
	_ outbox.Pauser                   = (*Backend)(nil)
	_ outbox.MemberLister             = (*Backend)(nil)
	_ outbox.Lister                   = (*Backend)(nil)
)

// Backend is the Redis outbox backend. It is safe for concurrent use. It
// never closes the client it was given.
type Backend struct {
	client redis.UniversalClient
	opts   Options
	parts  []keys
	// claims remembers, per partition, the pending member of each entry
	// the last fetch returned, so MarkSent can remove them without reading
	// their values (see markArgs).
	claims []lastfetch.Cache[string]
	// fronts remembers, per partition, the front hints of the last two
	// fetches (see frontSlot).
	fronts  []frontSlot
	meta    string // hash: partitions, created-at (the prefix's own slot)
	members string // hash: owner -> membership record (the prefix's own slot)
	// memberInfo: hash: owner -> host, version, start, last heartbeat
	// (the prefix's own slot; see membership.go)
	memberInfo string
	pauses     string // hash: the outbox's pauses (the prefix's own slot; see pause.go)
	cluster    bool
	// purgeNext is the partition the next PurgeParked starts at.
	purgeNext atomic.Uint32

	closed    atomic.Bool
	done      chan struct{}
	closeOnce sync.Once
}

// New returns a backend on client, which may be a *redis.Client, a
// *redis.ClusterClient, a failover client or any redis.UniversalClient.
//
// New validates opts, loads the scripts on every master (SCRIPT LOAD),
// reads or stores the partition count kept with the outbox (one round
// trip, meta.lua; see Options.Partitions) and reads maxmemory-policy
// (CONFIG GET; a server that forbids CONFIG is tolerated) to log a warning
// through Options.Logger when the policy can evict the outbox's keys.
//
// It fails when the scripts cannot be loaded; when Options.Partitions is 0
// and no outbox exists at Options.Prefix (no count is stored); and, with
// an error wrapping [outbox.PartitionMismatchError] (which also matches
// [outbox.ErrInvalidArgument]), when a positive Options.Partitions differs
// from the stored count.
func New(ctx context.Context, client redis.UniversalClient, opts Options) (*Backend, error) {
	if client == nil {
		return nil, errNilClient
	}
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	b := &Backend{client: client, opts: opts, done: make(chan struct{})}
	b.meta, b.members, b.memberInfo, b.pauses = outboxKeys(opts.Prefix)
	_, b.cluster = client.(*redis.ClusterClient)
	if err := b.LoadScripts(ctx); err != nil {
		return nil, err
	}
	n, err := b.partitionCount(ctx)
	if err != nil {
		return nil, err
	}
	b.parts = make([]keys, n)
	b.claims = make([]lastfetch.Cache[string], n)
	b.fronts = make([]frontSlot, n)
	for p := range b.parts {
		b.parts[p] = partitionKeys(opts.Prefix, p)
	}
	checkEviction(ctx, client, opts.Logger)
	return b, nil
}

// partitionCount runs meta.lua: it returns the count stored with the
// outbox, storing Options.Partitions first when none is stored and it is
// positive.
func (b *Backend) partitionCount(ctx context.Context) (int, error) {
	configured := b.opts.Partitions
	res, err := scriptMeta.Run(ctx, b.client, []string{b.meta}, configured).Result()
	if err != nil {
		return 0, b.mapErr(ctx, "New", err, b.meta)
	}
	if code, ok := res.(int64); ok && code == 0 {
		return 0, b.noOutbox(ctx)
	}
	a, ok := res.([]any)
	if !ok || len(a) != 3 {
		return 0, fmt.Errorf("redisoutbox: New: unexpected result %v from meta.lua", res)
	}
	var stored int64
	switch v := a[0].(type) {
	case int64:
		stored = v
	case string:
		stored, _ = strconv.ParseInt(v, 10, 64)
	}
	if stored < 1 || stored > maxPartitions {
		return 0, fmt.Errorf("redisoutbox: New: the partition count stored in %q is %v, not a count in 1..%d, so it was not written by this backend: stop every process of the outbox and restore the count it was created with (HSET %s partitions N)",
			b.meta, a[0], maxPartitions, b.meta)
	}
	if configured != 0 && int64(configured) != stored {
		return 0, fmt.Errorf("redisoutbox: New: %w", &outbox.PartitionMismatchError{Outbox: b.opts.Prefix, Configured: configured, Stored: int(stored)})
	}
	return int(stored), nil
}

// noOutbox is New's error when Options.Partitions is 0 and no count is
// stored. It costs one more round trip, only on this path, to tell an
// outbox of an earlier build (keys, but no stored count) from no outbox.
func (b *Backend) noOutbox(ctx context.Context) error {
	k := partitionKeys(b.opts.Prefix, 0)
	n, err := b.client.Exists(ctx, k.seq, k.leasever).Result()
	if err != nil {
		if ctxErr := ctx.Err(); ctxErr != nil {
			return ctxErr
		}
		n = 0
	}
	if n > 0 {
		return fmt.Errorf("redisoutbox: New: the outbox at prefix %q was created by an earlier build, which did not store its partition count (%q is missing); pass Options.Partitions with the count it was created with (1 if it was never set) once, and New stores it: %w",
			b.opts.Prefix, b.meta, outbox.ErrInvalidArgument)
	}
	return fmt.Errorf("redisoutbox: New: no outbox exists at prefix %q (no partition count is stored in %q); to create one, pass Options.Partitions (1..%d) and New stores it with the outbox; to open an existing one, check Options.Prefix and the Redis database: %w",
		b.opts.Prefix, b.meta, maxPartitions, outbox.ErrInvalidArgument)
}

// LoadScripts loads every script on every master (SCRIPT LOAD). New calls
// it; call it again after SCRIPT FLUSH if you want to avoid the one-time
// fallback to EVAL (the backend survives a flush without it).
func (b *Backend) LoadScripts(ctx context.Context) error {
	for _, s := range allScripts {
		if err := s.Load(ctx, b.client).Err(); err != nil {
			if ctxErr := ctx.Err(); ctxErr != nil {
				return ctxErr
			}
			return fmt.Errorf("redisoutbox: loading script %s.lua: %w; check that every master is reachable and that the user may run SCRIPT and EVALSHA (ACL)", s.name, err)
		}
	}
	return nil
}

// checkEviction warns when maxmemory-policy can evict the outbox's keys.
func checkEviction(ctx context.Context, client redis.UniversalClient, log *slog.Logger) {
	check := func(ctx context.Context, c redis.UniversalClient, node string) {
		vals, err := c.ConfigGet(ctx, "maxmemory-policy").Result()
		if err != nil {
			log.Debug("redisoutbox: could not read maxmemory-policy (CONFIG may be disabled); make sure it is noeviction", "node", node, "error", err)
			return
		}
		policy := vals["maxmemory-policy"]
		switch {
		case strings.HasPrefix(policy, "allkeys-"):
			log.Error("redisoutbox: Redis maxmemory-policy evicts any key: when Redis reaches maxmemory it will silently delete outbox entries (lost messages). Set maxmemory-policy noeviction on every master (appends then fail loudly instead).",
				"node", node, "maxmemory-policy", policy)
		case strings.HasPrefix(policy, "volatile-"):
			log.Warn("redisoutbox: Redis maxmemory-policy evicts keys with a TTL: under memory pressure it can delete partition lease keys, so two relays may publish the same batch (duplicates, not loss). Prefer maxmemory-policy noeviction.",
				"node", node, "maxmemory-policy", policy)
		}
	}
	if cc, ok := client.(*redis.ClusterClient); ok {
		_ = cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
			check(ctx, c, c.Options().Addr)
			return nil
		})
		return
	}
	check(ctx, client, "")
}

// Partitions reports the number of partitions: the count stored with the
// outbox, which New read or stored. It keeps working after Close.
func (b *Backend) Partitions() int { return len(b.parts) }

// HashTag returns the hash tag of the partition that entries with the given
// key go to, for example "{outbox:3}". On Redis Cluster a transaction (MULTI)
// can only touch one slot: put this tag in the keys of the business write
// that shares a transaction with AppendInTx.
func (b *Backend) HashTag(key string) string {
	return b.parts[outbox.PartitionOf(key, len(b.parts))].tag
}

// Close marks the backend closed: every later call returns an error wrapping
// [outbox.ErrClosed] and notification channels close. It never closes the
// client. It is idempotent and returns nil.
func (b *Backend) Close() error {
	b.closeOnce.Do(func() {
		b.closed.Store(true)
		close(b.done)
	})
	return nil
}

var errClosed = fmt.Errorf("redisoutbox: the backend is closed; create a new one with New: %w", outbox.ErrClosed)

func (b *Backend) check(ctx context.Context) error {
	if b.closed.Load() {
		return errClosed
	}
	return ctx.Err()
}

// argErr wraps an error of the shared argument checks (outbox.Check*)
// with the package and the operation.
func argErr(op string, err error) error {
	return fmt.Errorf("redisoutbox: %s: %w", op, err)
}

// partition returns the keys of partition p after outbox.CheckPartition.
func (b *Backend) partition(op string, p int) (*keys, error) {
	if err := outbox.CheckPartition(len(b.parts), p); err != nil {
		return nil, argErr(op, err)
	}
	return &b.parts[p], nil
}

func token(l outbox.Lease) string {
	return strconv.FormatInt(l.Version, 10) + ":" + l.Owner
}

// ceilMillis is t in Unix ms, rounded up (an entry is never due before
// its time) and clamped at 0.
func ceilMillis(t time.Time) int64 {
	ms := t.UnixMilli()
	if t.Sub(time.UnixMilli(ms)) > 0 {
		ms++
	}
	return max(0, ms)
}

func ttlMillis(ttl time.Duration) int64 {
	return max(1, int64((ttl+time.Millisecond-1)/time.Millisecond))
}

// delayMillis is d in ms, rounded up (towards +inf, so a retry is never
// due early); d may be negative.
func delayMillis(d time.Duration) int64 {
	ms := int64(d / time.Millisecond)
	if d%time.Millisecond > 0 {
		ms++
	}
	return ms
}

// appendArgs builds the append script's KEYS and ARGV for partition p
// (append_keyseq.lua's with Options.KeySequence).
func (b *Backend) appendArgs(p int, entries []outbox.Entry) ([]string, []any) {
	k := &b.parts[p]
	channel := k.notify
	if b.opts.NoNotify {
		channel = ""
	}
	if b.opts.KeySequence {
		return b.appendKeySeqArgs(k, channel, p, entries)
	}
	args := make([]any, 0, 2+3*len(entries))
	args = append(args, channel, p)
	for i := range entries {
		e := &entries[i]
		due := ""
		if !e.NotBefore.IsZero() {
			due = strconv.FormatInt(ceilMillis(e.NotBefore), 10)
		}
		args = append(args, e.ID, due, encodeEntry(e))
	}
	return []string{k.entries, k.pending, k.seq, k.sealed}, args
}

// appendKeySeqArgs is appendArgs for append_keyseq.lua: a fourth value per
// entry, the offset at which the script writes the key's number (see
// encodeEntryKeySeq), "" for an entry without a key.
func (b *Backend) appendKeySeqArgs(k *keys, channel string, p int, entries []outbox.Entry) ([]string, []any) {
	args := make([]any, 0, 2+4*len(entries))
	args = append(args, channel, p)
	for i := range entries {
		e := &entries[i]
		due := ""
		if !e.NotBefore.IsZero() {
			due = strconv.FormatInt(ceilMillis(e.NotBefore), 10)
		}
		if e.Key == "" {
			args = append(args, e.ID, due, encodeEntry(e), "")
			continue
		}
		blob, off := encodeEntryKeySeq(e)
		args = append(args, e.ID, due, blob, strconv.Itoa(off))
	}
	return []string{k.entries, k.pending, k.seq, k.keyseq, k.sealed}, args
}

// appendScript returns the append script of the backend's options.
func (b *Backend) appendScript() script {
	if b.opts.KeySequence {
		return scriptAppendKeySeq
	}
	return scriptAppend
}

// group splits prepared entries by partition, keeping slice order.
func (b *Backend) group(entries []outbox.Entry) [][]outbox.Entry {
	if len(b.parts) == 1 {
		return [][]outbox.Entry{entries}
	}
	byPart := make(map[int][]outbox.Entry)
	var order []int
	for _, e := range entries {
		if _, ok := byPart[e.Partition]; !ok {
			order = append(order, e.Partition)
		}
		byPart[e.Partition] = append(byPart[e.Partition], e)
	}
	out := make([][]outbox.Entry, len(order))
	for i, p := range order {
		out[i] = byPart[p]
	}
	return out
}

// AppendInTx queues the entries into tx, the caller's transaction
// (client.TxPipeline() or the pipe of client.TxPipelined), as one EVAL of
// the append script per partition touched. They are written if and only if
// the caller's EXEC succeeds; a Discard leaves nothing behind. The script
// also publishes the partition's wake-up in the same EXEC (SPUBLISH of the
// partition number on the partition's channel; see
// [Backend.Notifications]), unless Options.NoNotify is set.
//
// The script is sent with EVAL (its full body), not EVALSHA: inside MULTI
// an EVALSHA of a script the server does not know (after a restart or
// SCRIPT FLUSH) fails at EXEC while the other queued commands still apply,
// which would commit the business write without its entries.
//
// Errors of the script itself (none are expected) surface from the
// caller's Exec.
//
// Partial failure: Redis does not roll back. When a queued command fails
// at run time (for example WRONGTYPE in the caller's own business write),
// EXEC still runs every other queued command, so the entries ARE appended
// and will be published although the business write failed; go-redis then
// returns that command's error from Exec, which reads as if nothing
// happened. Pass Exec's result to [CheckExec]: it returns an [*ExecError]
// naming the failed command and the appended entry IDs (to compensate, or
// to cancel with [Backend.Cancel]). A command refused when queued (wrong
// arity, EXECABORT) or a WATCH conflict runs nothing.
//
// Redis Cluster: a MULTI can only touch one slot. The entries of one
// partition share a slot (its hash tag, [Backend.HashTag]), so a
// transaction whose entries all fall into one partition, and whose business
// keys carry that partition's tag, commits atomically. A TxPipeline that
// spans slots is refused by go-redis at Exec with CROSSSLOT before anything
// is sent, so nothing is written. With a plain (non-transactional)
// client.Pipeline() as tx, entries of several partitions are written by one
// script per partition, each atomic on its own.
//
// With Options.KeySequence the script is append_keyseq.lua, which also
// numbers each keyed entry it adds in the [outbox.HeaderKeySeq] header,
// from the partition's "{prefix:p}:keyseq" hash, in the same EXEC (see
// Options.KeySequence).
//
// Entries are validated with [outbox.PrepareEntries] first (errors wrap
// [outbox.ErrInvalidEntry]). No entries: nothing is queued. The entries are
// not retained. After Close it returns [outbox.ErrClosed].
func (b *Backend) AppendInTx(ctx context.Context, tx redis.Pipeliner, entries ...outbox.Entry) error {
	if err := b.check(ctx); err != nil {
		return err
	}
	if len(entries) == 0 {
		return nil
	}
	if tx == nil {
		return fmt.Errorf("redisoutbox: AppendInTx: tx is nil; pass client.TxPipeline() or the pipe of client.TxPipelined: %w", outbox.ErrInvalidArgument)
	}
	prepared, err := b.prepare(ctx, "AppendInTx", entries)
	if err != nil {
		return err
	}
	groups := b.group(prepared)
	s := b.appendScript()
	for _, g := range groups {
		ks, args := b.appendArgs(g[0].Partition, g)
		tx.Eval(ctx, s.src, ks, args...)
	}
	return nil
}

// prepare validates entries for an append (outbox.PrepareEntriesWith, and
// with Options.KeySequence outbox.CheckKeySeqHeaders).
func (b *Backend) prepare(ctx context.Context, op string, entries []outbox.Entry) ([]outbox.Entry, error) {
	if b.opts.KeySequence {
		if err := outbox.CheckKeySeqHeaders(entries); err != nil {
			return nil, fmt.Errorf("redisoutbox: %s: %w", op, err)
		}
	}
	return outbox.PrepareEntriesWith(ctx, entries, len(b.parts), b.opts.Limits)
}

// Append appends entries outside any caller transaction, in one round
// trip. On a single node (or Sentinel) all entries commit together (one
// MULTI/EXEC); on Redis Cluster entries of different partitions are written
// by separate scripts, each atomic for its partition. Validation, no-op
// and idempotency rules are those of AppendInTx.
func (b *Backend) Append(ctx context.Context, entries ...outbox.Entry) error {
	if err := b.check(ctx); err != nil {
		return err
	}
	if len(entries) == 0 {
		return nil
	}
	prepared, err := b.prepare(ctx, "Append", entries)
	if err != nil {
		return err
	}
	groups := b.group(prepared)
	s := b.appendScript()
	if len(groups) == 1 {
		ks, args := b.appendArgs(groups[0][0].Partition, groups[0])
		return b.mapErr(ctx, "Append", s.Run(ctx, b.client, ks, args...).Err(), ks...)
	}
	run := b.client.TxPipelined
	if b.cluster {
		run = b.client.Pipelined
	}
	var all []string
	_, err = run(ctx, func(pipe redis.Pipeliner) error {
		for _, g := range groups {
			ks, args := b.appendArgs(g[0].Partition, g)
			all = append(all, ks...)
			pipe.Eval(ctx, s.src, ks, args...)
		}
		return nil
	})
	return b.mapErr(ctx, "Append", err, all...)
}
