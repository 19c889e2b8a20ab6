package redisoutbox

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/outboxrelay/outbox/internal/testenv"
)

// target is a Redis deployment the tests run against.
type target struct {
	name   string
	client func(t *testing.T) redis.UniversalClient
}

var targets = []target{
	{"Standalone", standaloneClient},
	{"Cluster", clusterClient},
}

func standaloneClient(t *testing.T) redis.UniversalClient {
	t.Helper()
	opt, err := redis.ParseURL(testenv.RedisURL())
	require.NoError(t, err, "OUTBOX_REDIS_URL")
	c := redis.NewClient(opt)
	t.Cleanup(func() { _ = c.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if err := c.Ping(ctx).Err(); err != nil {
		testenv.Unavailable(t, "Redis", "OUTBOX_REDIS_URL", err)
	}
	return c
}

func clusterClient(t *testing.T) redis.UniversalClient {
	t.Helper()
	addrs := testenv.RedisClusterAddrs()
	if addrs == nil {
		testenv.Unavailable(t, "Redis Cluster", "OUTBOX_REDIS_CLUSTER_ADDRS",
			errors.New("OUTBOX_REDIS_CLUSTER_ADDRS is unset; start one with scripts/redis-cluster.sh start and set it to 127.0.0.1:7000,127.0.0.1:7001,127.0.0.1:7002"))
	}
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs})
	t.Cleanup(func() { _ = c.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if err := c.Ping(ctx).Err(); err != nil {
		testenv.Unavailable(t, "Redis Cluster", "OUTBOX_REDIS_CLUSTER_ADDRS", err)
	}
	return c
}

// uniquePrefix returns a fresh hash-tagged prefix for one test.
func uniquePrefix() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return "test:{ob" + hex.EncodeToString(b[:]) + "}"
}

// newBackend creates an outbox with a unique prefix on c (one partition
// unless opts says otherwise) and deletes its keys when the test ends.
func newBackend(t *testing.T, c redis.UniversalClient, opts Options) *Backend {
	t.Helper()
	if opts.Prefix == "" {
		opts.Prefix = uniquePrefix()
	}
	if opts.Partitions == 0 {
		opts.Partitions = 1
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	b, err := New(ctx, c, opts)
	require.NoError(t, err)
	t.Cleanup(func() {
		_ = b.Close()
		deleteKeys(c, b)
	})
	return b
}

// allKeys lists every key of b's outbox (those of earlier builds too).
func allKeys(b *Backend) []string {
	out := []string{b.meta, b.members, b.memberInfo, b.pauses}
	for _, k := range b.parts {
		out = append(out, k.entries, k.pending, k.inflight, k.parked, k.parkedat, k.keyorder, k.lease, k.leasever, k.seq, k.keyseq, k.hold, k.sealed, k.export, k.history, k.paused)
	}
	return out
}

// deleteKeys deletes every key of b's outbox, one key per call (they span
// Cluster slots).
func deleteKeys(c redis.UniversalClient, b *Backend) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, key := range allKeys(b) {
		_ = c.Del(ctx, key).Err()
	}
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}
