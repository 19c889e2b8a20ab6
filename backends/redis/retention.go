package redisoutbox

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/outboxrelay/outbox"
)

// Compile-time checks of the retention and health interfaces. There is no
// ArchiveJanitor: MarkSent deletes sent entries.
var (
	_ outbox.ParkedPurger  = (*Backend)(nil)
	_ outbox.HealthChecker = (*Backend)(nil)
)

// PurgeParked removes at most limit entries parked before before (by
// their park time, which every park records in the partition's parked-at
// sorted set, in the server's milliseconds) and returns their IDs. It
// runs purge_parked.lua on one partition after the other, round-robin
// from where the previous call stopped, each asked for what is left of
// limit, until limit entries are removed or every partition was visited:
// one round trip per partition visited, each partition's removal atomic.
// Within a partition entries go oldest park first; across partitions the
// order is the visit's. Each entry is removed as [Backend.Cancel] removes
// it (its value, parked member, park time and history); pending and
// requeued entries are never removed (a requeue drops the park time, and
// a park after it records a new one). Entries parked by a build before
// park times were recorded get the time of the first call that sees them
// (see purge_parked.lua). more is true when a visited partition reported
// entries parked before before left, or when the call stopped before
// visiting every partition. On an error it returns the IDs removed before
// it with the error. A limit below 1 is an error wrapping
// [outbox.ErrInvalidArgument]; after Close it returns [outbox.ErrClosed].
// Safe for concurrent use.
func (b *Backend) PurgeParked(ctx context.Context, before time.Time, limit int) (ids []string, more bool, err error) {
	const op = "PurgeParked"
	if err := b.check(ctx); err != nil {
		return nil, false, err
	}
	if limit < 1 {
		return nil, false, fmt.Errorf("redisoutbox: %s: limit is %d; use 1 or more: %w", op, limit, outbox.ErrInvalidArgument)
	}
	n := len(b.parts)
	start := int(b.purgeNext.Add(1)-1) % n
	bound := before.UnixMilli()
	for i := 0; i < n; i++ {
		if len(ids) == limit {
			b.purgeNext.Store(uint32((start + i) % n))
			return ids, true, nil
		}
		k := &b.parts[(start+i)%n]
		ks := []string{k.entries, k.pending, k.parked, k.keyorder, k.seq, k.history, k.parkedat}
		res, err := scriptPurgeParked.Run(ctx, b.client, ks, bound, limit-len(ids)).Result()
		if err != nil {
			return ids, true, b.mapErr(ctx, op, err, ks...)
		}
		got, left, err := purgeResult(res)
		if err != nil {
			return ids, true, fmt.Errorf("redisoutbox: %s: %w", op, err)
		}
		ids = append(ids, got...)
		more = more || left
	}
	return ids, more, nil
}

// purgeResult reads purge_parked.lua's {ids, more}.
func purgeResult(res any) (ids []string, more bool, err error) {
	a, ok := res.([]any)
	if !ok || len(a) != 2 {
		return nil, false, fmt.Errorf("unexpected result %v from purge_parked.lua", res)
	}
	list, _ := a[0].([]any)
	for _, v := range list {
		s, _ := v.(string)
		ids = append(ids, s)
	}
	m, _ := a[1].(int64)
	return ids, m == 1, nil
}

// The bounds of the memory warnings of [Backend.Health].
const (
	// FragmentationRatio is the mem_fragmentation_ratio above which Health
	// warns "memory-fragmentation" (with used_memory over
	// FragmentationMinUsed): below it the difference between the
	// process's resident memory and its data is the allocator's ordinary
	// overhead.
	FragmentationRatio = 1.5
	// FragmentationMinUsed is the used_memory (64 MiB) below which a high
	// fragmentation ratio says nothing: the process's fixed resident
	// memory (6 to 12 MiB for an idle Redis 7) dominates a small data
	// set, whose ratio is then 5 or more with nothing wasted.
	FragmentationMinUsed = 64 << 20
	// MaxmemoryNear is the share of maxmemory above which Health warns
	// "maxmemory-near".
	MaxmemoryNear = 0.9
)

// nodeMemory is one server's INFO memory.
type nodeMemory struct {
	node                 string
	used, rss, maxmemory int64
	fragmentation        float64
	hasFragmentation     bool
	policy               string
}

// Health implements [outbox.HealthChecker] with INFO memory, read from
// the server (on a Cluster, from every master: one round trip each). It
// changes nothing. Memory is the server's used_memory and
// used_memory_rss (on a Cluster, their sums over the masters) and
// mem_fragmentation_ratio (on a Cluster, the worst master's); Tables is
// empty. Warnings, each naming the node (its address; "" on a standalone
// server) as Object:
//
//   - "memory-fragmentation" when mem_fragmentation_ratio is over
//     [FragmentationRatio] with used_memory over [FragmentationMinUsed]:
//     the server holds memory its data no longer uses (a drained backlog
//     leaves it behind); the fix is activedefrag yes, or a restart (of a
//     replica first, then a failover).
//   - "maxmemory-near" when used_memory is over [MaxmemoryNear] of a set
//     maxmemory: appends are about to fail (noeviction) or keys to be
//     evicted.
//   - "maxmemory-policy-evicts" when maxmemory_policy is allkeys-* (the
//     server may delete outbox entries) or volatile-* (it may delete lease
//     keys), the condition New also logs.
//
// After Close it returns [outbox.ErrClosed]. Safe for concurrent use.
func (b *Backend) Health(ctx context.Context) (outbox.Health, error) {
	const op = "Health"
	if err := b.check(ctx); err != nil {
		return outbox.Health{}, err
	}
	nodes, err := b.memoryInfo(ctx)
	if err != nil {
		return outbox.Health{}, b.mapErr(ctx, op, err)
	}
	var h outbox.Health
	m := &outbox.MemoryHealth{}
	for _, n := range nodes {
		m.UsedBytes += n.used
		m.RSSBytes += n.rss
		if n.fragmentation > m.Fragmentation {
			m.Fragmentation = n.fragmentation
		}
		h.Warnings = append(h.Warnings, n.warnings()...)
	}
	h.Memory = m
	return h, nil
}

// memoryInfo reads INFO memory from the server, or from every master.
func (b *Backend) memoryInfo(ctx context.Context) ([]nodeMemory, error) {
	cc, ok := b.client.(*redis.ClusterClient)
	if !ok {
		s, err := b.client.Info(ctx, "memory").Result()
		if err != nil {
			return nil, err
		}
		return []nodeMemory{parseMemoryInfo("", s)}, nil
	}
	var (
		mu    sync.Mutex
		nodes []nodeMemory
	)
	err := cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
		s, err := c.Info(ctx, "memory").Result()
		if err != nil {
			return err
		}
		mu.Lock()
		nodes = append(nodes, parseMemoryInfo(c.Options().Addr, s))
		mu.Unlock()
		return nil
	})
	return nodes, err
}

// parseMemoryInfo reads the fields of INFO memory Health uses.
func parseMemoryInfo(node, info string) nodeMemory {
	n := nodeMemory{node: node}
	for line := range strings.Lines(info) {
		name, value, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok {
			continue
		}
		switch name {
		case "used_memory":
			n.used, _ = strconv.ParseInt(value, 10, 64)
		case "used_memory_rss":
			n.rss, _ = strconv.ParseInt(value, 10, 64)
		case "maxmemory":
			n.maxmemory, _ = strconv.ParseInt(value, 10, 64)
		case "mem_fragmentation_ratio":
			f, err := strconv.ParseFloat(value, 64)
			n.fragmentation, n.hasFragmentation = f, err == nil
		case "maxmemory_policy":
			n.policy = value
		}
	}
	if !n.hasFragmentation && n.used > 0 {
		n.fragmentation = float64(n.rss) / float64(n.used)
	}
	return n
}

// warnings are the node's memory warnings.
func (n nodeMemory) warnings() []outbox.HealthWarning {
	where := "the Redis server"
	if n.node != "" {
		where = "the Redis master " + n.node
	}
	var out []outbox.HealthWarning
	if n.fragmentation > FragmentationRatio && n.used > FragmentationMinUsed {
		out = append(out, outbox.HealthWarning{Code: "memory-fragmentation", Object: n.node,
			Message: fmt.Sprintf("redisoutbox: %s is fragmented: it holds %s resident for %s of data (mem_fragmentation_ratio %.2f, over %.1f), memory a drained backlog left behind; turn on active defragmentation (CONFIG SET activedefrag yes, jemalloc builds) or restart it (a replica first, then fail over)",
				where, mib(n.rss), mib(n.used), n.fragmentation, FragmentationRatio)})
	}
	if n.maxmemory > 0 && float64(n.used) > MaxmemoryNear*float64(n.maxmemory) {
		out = append(out, outbox.HealthWarning{Code: "maxmemory-near", Object: n.node,
			Message: fmt.Sprintf("redisoutbox: %s uses %s of its maxmemory %s (%.0f%%): past it, appends fail (noeviction) or keys are evicted; raise maxmemory (CONFIG SET maxmemory), free memory, or drain the backlog",
				where, mib(n.used), mib(n.maxmemory), 100*float64(n.used)/float64(n.maxmemory))})
	}
	switch {
	case strings.HasPrefix(n.policy, "allkeys-"):
		out = append(out, outbox.HealthWarning{Code: "maxmemory-policy-evicts", Object: n.node,
			Message: fmt.Sprintf("redisoutbox: %s has maxmemory-policy %s: at maxmemory it silently deletes any key, outbox entries too (lost messages); set maxmemory-policy noeviction (appends then fail loudly instead)", where, n.policy)})
	case strings.HasPrefix(n.policy, "volatile-"):
		out = append(out, outbox.HealthWarning{Code: "maxmemory-policy-evicts", Object: n.node,
			Message: fmt.Sprintf("redisoutbox: %s has maxmemory-policy %s: at maxmemory it deletes keys with a TTL, partition leases too, so two relays may publish the same batch (duplicates); set maxmemory-policy noeviction", where, n.policy)})
	}
	return out
}

// mib formats n bytes in MiB.
func mib(n int64) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }
