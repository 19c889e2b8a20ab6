package redisinbox_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/outboxrelay/outbox/backends/redis/redisinbox"
	"github.com/outboxrelay/outbox/internal/testenv"
)

func TestMain(m *testing.M) {
	flag.Parse()
	examplesNeedRedis()
	os.Exit(m.Run())
}

// examplesNeedRedis makes the Examples runnable or leaves them out, as the
// outbox backend's TestMain does: they run against the Redis at
// OUTBOX_REDIS_URL (set here when testenv found the server elsewhere);
// when no server answers and OUTBOX_REQUIRE_SERVICES is not 1, they are
// left out through -test.skip, which is said on stderr.
func examplesNeedRedis() {
	url := testenv.RedisURL()
	err := ping(url)
	if err == nil {
		_ = os.Setenv("OUTBOX_REDIS_URL", url)
		return
	}
	if testenv.Required() {
		return
	}
	testenv.SkipExamples("redisinbox", "Redis", "no server answers ("+err.Error()+"); set OUTBOX_REDIS_URL or run ./scripts/services.sh start")
}

func ping(url string) error {
	opt, err := redis.ParseURL(url)
	if err != nil {
		return err
	}
	opt.MaxRetries = -1
	c := redis.NewClient(opt)
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return c.Ping(ctx).Err()
}

// target is a Redis deployment the tests run against.
type target struct {
	name   string
	client func(t *testing.T) redis.UniversalClient
}

var targets = []target{
	{"Standalone", func(t *testing.T) redis.UniversalClient { return standaloneClient(t, nil) }},
	{"Cluster", func(t *testing.T) redis.UniversalClient { return clusterClient(t, nil) }},
}

// standaloneClient connects to the Redis at OUTBOX_REDIS_URL; edit, when
// not nil, changes the options first.
func standaloneClient(t *testing.T, edit func(*redis.Options)) *redis.Client {
	t.Helper()
	opt, err := redis.ParseURL(testenv.RedisURL())
	require.NoError(t, err, "OUTBOX_REDIS_URL")
	if edit != nil {
		edit(opt)
	}
	c := redis.NewClient(opt)
	t.Cleanup(func() { _ = c.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if err := c.Ping(ctx).Err(); err != nil {
		testenv.Unavailable(t, "Redis", "OUTBOX_REDIS_URL", err)
	}
	return c
}

// clusterClient connects to the Redis Cluster at
// OUTBOX_REDIS_CLUSTER_ADDRS; edit, when not nil, changes the options
// first.
func clusterClient(t *testing.T, edit func(*redis.ClusterOptions)) *redis.ClusterClient {
	t.Helper()
	addrs := testenv.RedisClusterAddrs()
	if addrs == nil {
		testenv.Unavailable(t, "Redis Cluster", "OUTBOX_REDIS_CLUSTER_ADDRS",
			errors.New("OUTBOX_REDIS_CLUSTER_ADDRS is unset; start one with scripts/redis-cluster.sh start and set it to 127.0.0.1:7000,127.0.0.1:7001,127.0.0.1:7002"))
	}
	opt := &redis.ClusterOptions{Addrs: addrs}
	if edit != nil {
		edit(opt)
	}
	c := redis.NewClusterClient(opt)
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
	return "test:{ib" + hex.EncodeToString(b[:]) + "}"
}

// newStore returns a store under a fresh prefix on c and deletes the
// prefix's keys when the test ends.
func newStore(t *testing.T, c redis.UniversalClient) *redisinbox.Store {
	t.Helper()
	s, err := redisinbox.New(c, redisinbox.Options{Prefix: uniquePrefix()})
	require.NoError(t, err)
	t.Cleanup(func() { deletePrefix(c, s.Prefix()) })
	return s
}

// deletePrefix deletes every key under prefix (on every master of a
// Cluster), a page of SCAN per DEL: the keys share the prefix's hash tag,
// so one DEL may name many of them on Cluster too.
func deletePrefix(c redis.UniversalClient, prefix string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	del := func(ctx context.Context, node redis.Cmdable) error {
		var cursor uint64
		for {
			keys, next, err := node.Scan(ctx, cursor, prefix+"*", 1000).Result()
			if err != nil {
				return err
			}
			if len(keys) > 0 {
				_ = node.Del(ctx, keys...).Err() // one slot: the keys share the prefix's tag
			}
			if cursor = next; cursor == 0 {
				return nil
			}
		}
	}
	if cc, ok := c.(*redis.ClusterClient); ok {
		_ = cc.ForEachMaster(ctx, func(ctx context.Context, node *redis.Client) error { return del(ctx, node) })
		return
	}
	_ = del(ctx, c)
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// roundTrips is a go-redis hook that counts what goes to the server: a
// command, a pipeline or a MULTI/EXEC each count as one round trip.
type roundTrips struct{ n atomic.Int64 }

func (r *roundTrips) DialHook(next redis.DialHook) redis.DialHook { return next }

func (r *roundTrips) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if n := cmd.Name(); n != "cluster" && n != "ping" { // go-redis's reloads of the slot map, a Ring's heartbeats
			r.n.Add(1)
		}
		return next(ctx, cmd)
	}
}

func (r *roundTrips) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		r.n.Add(1)
		return next(ctx, cmds)
	}
}

// backdate moves the committed records of ids and keys in s back by d:
// their scores in the ids and seqs sorted sets (what Purge reads), and
// the ID keys' values. A record that does not exist is left absent. (It
// is the conformance suite's Harness.Backdate for this store.)
func backdate(t *testing.T, c redis.UniversalClient, s *redisinbox.Store, d time.Duration, ids, keys []string) {
	t.Helper()
	ctx := testCtx(t)
	move := func(zset string, members []string, key func(string) string) {
		if len(members) == 0 {
			return
		}
		scores, err := c.ZMScore(ctx, zset, members...).Result()
		require.NoError(t, err)
		var zs []redis.Z
		for i, m := range members {
			if scores[i] == 0 {
				continue // absent
			}
			ms := scores[i] - float64(d.Milliseconds())
			zs = append(zs, redis.Z{Score: ms, Member: m})
			if key != nil {
				require.NoError(t, c.Set(ctx, key(m), int64(ms), 0).Err())
			}
		}
		if len(zs) > 0 {
			require.NoError(t, c.ZAddXX(ctx, zset, zs...).Err())
		}
	}
	move(s.Prefix()+":ids", ids, func(id string) string { return s.Prefix() + ":id:" + id })
	move(s.Prefix()+":seqs", keys, nil)
}
