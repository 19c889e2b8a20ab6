package redisoutbox

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/outboxrelay/outbox"
)

// Compile-time checks of the interfaces Backend implements.
var (
	_ outbox.Backend[redis.Pipeliner] = (*Backend)(nil)
	_ outbox.Notifier                 = (*Backend)(nil)
	_ outbox.Canceler                 = (*Backend)(nil)
	_ outbox.Inspector                = (*Backend)(nil)
)

// Backend is the Redis outbox backend. It is safe for concurrent use. It
// never closes the client it was given.
type Backend struct {
	client  redis.UniversalClient
	opts    Options
	parts   []keys
	channel string
	cluster bool

	closed    atomic.Bool
	done      chan struct{}
	closeOnce sync.Once
}

// keys are the Redis keys of one partition; they share one hash tag.
type keys struct {
	tag      string // "{outbox:3}"
	entries  string // hash: entry ID -> encoded entry
	pending  string // zset: member seq8+ID, score = next attempt time in ms
	inflight string // zset of builds before v0.2 (claimed entries); acquire.lua empties it
	parked   string // zset: parked entry IDs, score 0 (pages by ID)
	keyorder string // zset, scores 0: key-length|key|position|seq|ID per keyed entry
	lease    string // string "version:owner" with a PX expiry
	leasever string // counter: last lease version granted
	seq      string // counter: last append sequence
}

func partitionKeys(prefix string, p int) keys {
	i, j := strings.IndexByte(prefix, '{'), strings.IndexByte(prefix, '}')
	tag := prefix[i:j] + ":" + strconv.Itoa(p) + "}"
	base := prefix[:i] + tag + prefix[j+1:]
	return keys{
		tag:      tag,
		entries:  base + ":entries",
		pending:  base + ":pending",
		inflight: base + ":inflight",
		parked:   base + ":parked",
		keyorder: base + ":keyorder",
		lease:    base + ":lease",
		leasever: base + ":leasever",
		seq:      base + ":seq",
	}
}

// New returns a backend on client, which may be a *redis.Client, a
// *redis.ClusterClient, a failover client or any redis.UniversalClient.
//
// New validates opts, loads the scripts on every master (SCRIPT LOAD), and
// reads maxmemory-policy (CONFIG GET; a server that forbids CONFIG is
// tolerated) to log a warning through Options.Logger when the policy can
// evict the outbox's keys. It does one round trip per master for each and
// fails when the scripts cannot be loaded.
func New(ctx context.Context, client redis.UniversalClient, opts Options) (*Backend, error) {
	if client == nil {
		return nil, errNilClient
	}
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	b := &Backend{
		client:  client,
		opts:    opts,
		parts:   make([]keys, opts.Partitions),
		channel: "outbox:notify:" + opts.Prefix,
		done:    make(chan struct{}),
	}
	_, b.cluster = client.(*redis.ClusterClient)
	if opts.NoNotify {
		b.channel = ""
	}
	for p := range b.parts {
		b.parts[p] = partitionKeys(opts.Prefix, p)
	}
	if err := b.LoadScripts(ctx); err != nil {
		return nil, err
	}
	checkEviction(ctx, client, opts.Logger)
	return b, nil
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

// Partitions reports the number of partitions (Options.Partitions). It
// keeps working after Close.
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

// wrap maps a client error: context errors pass through, a closed client
// becomes ErrClosed, anything else is wrapped with the operation name.
func (b *Backend) wrap(ctx context.Context, op string, err error) error {
	if err == nil {
		return nil
	}
	if ctxErr := ctx.Err(); ctxErr != nil {
		return ctxErr
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	if errors.Is(err, redis.ErrClosed) {
		return fmt.Errorf("redisoutbox: %s: the Redis client is closed: %w", op, outbox.ErrClosed)
	}
	return fmt.Errorf("redisoutbox: %s: %w", op, err)
}

// codeErr maps a script's return code to the SPI's sentinel errors.
func codeErr(op string, lease outbox.Lease, code int64) error {
	switch code {
	case -1:
		return fmt.Errorf("redisoutbox: %s: the lease on partition %d is no longer held by %q at version %d (it expired, was taken over or was released); acquire the partition again: %w",
			op, lease.Partition, lease.Owner, lease.Version, outbox.ErrLeaseLost)
	case -2:
		return fmt.Errorf("redisoutbox: %s: partition %d is leased by another owner; retry after it expires or is released: %w",
			op, lease.Partition, outbox.ErrLeaseHeld)
	}
	return fmt.Errorf("redisoutbox: %s: unexpected script result %d", op, code)
}

func (b *Backend) partition(op string, p int) (*keys, error) {
	if p < 0 || p >= len(b.parts) {
		return nil, fmt.Errorf("redisoutbox: %s: partition %d is out of range; the backend has partitions 0..%d: %w",
			op, p, len(b.parts)-1, outbox.ErrInvalidArgument)
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

// appendArgs builds the append script's KEYS and ARGV for one partition.
func (b *Backend) appendArgs(k *keys, entries []outbox.Entry) ([]string, []any) {
	args := make([]any, 0, 1+3*len(entries))
	args = append(args, b.channel)
	for i := range entries {
		e := &entries[i]
		due := ""
		if !e.NotBefore.IsZero() {
			due = strconv.FormatInt(ceilMillis(e.NotBefore), 10)
		}
		args = append(args, e.ID, due, encodeEntry(e))
	}
	return []string{k.entries, k.pending, k.seq}, args
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
// also publishes the wake-up in the same EXEC.
//
// The script is sent with EVAL (its full body), not EVALSHA: inside MULTI
// an EVALSHA of a script the server does not know (after a restart or
// SCRIPT FLUSH) fails at EXEC while the other queued commands still apply,
// which would commit the business write without its entries.
//
// Errors of the script itself (none are expected) surface from the
// caller's Exec.
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
	prepared, err := outbox.PrepareEntries(ctx, entries, len(b.parts))
	if err != nil {
		return err
	}
	groups := b.group(prepared)
	for _, g := range groups {
		ks, args := b.appendArgs(&b.parts[g[0].Partition], g)
		tx.Eval(ctx, scriptAppend.src, ks, args...)
	}
	return nil
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
	prepared, err := outbox.PrepareEntries(ctx, entries, len(b.parts))
	if err != nil {
		return err
	}
	groups := b.group(prepared)
	if len(groups) == 1 {
		ks, args := b.appendArgs(&b.parts[groups[0][0].Partition], groups[0])
		return b.wrap(ctx, "Append", scriptAppend.Run(ctx, b.client, ks, args...).Err())
	}
	run := b.client.TxPipelined
	if b.cluster {
		run = b.client.Pipelined
	}
	_, err = run(ctx, func(pipe redis.Pipeliner) error {
		for _, g := range groups {
			ks, args := b.appendArgs(&b.parts[g[0].Partition], g)
			pipe.Eval(ctx, scriptAppend.src, ks, args...)
		}
		return nil
	})
	return b.wrap(ctx, "Append", err)
}
