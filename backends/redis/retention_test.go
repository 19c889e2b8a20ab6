package redisoutbox

import (
	"context"
	"fmt"
	"net"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/outboxrelay/outbox"
)

// TestRetention runs the parked purge and the health check on every
// target: a standalone server and, with OUTBOX_REDIS_CLUSTER_ADDRS, a
// Cluster.
func TestRetention(t *testing.T) {
	t.Parallel()
	for _, tg := range targets {
		t.Run(tg.name, func(t *testing.T) {
			t.Parallel()
			c := tg.client(t)
			t.Run("PurgeParkedAcrossPartitions", func(t *testing.T) { t.Parallel(); testPurgeParked(t, c) })
			t.Run("PurgeParkedRoundRobin", func(t *testing.T) { t.Parallel(); testPurgeParkedRoundRobin(t, c) })
			t.Run("PurgeParkedKeepsRequeuedAndPending", func(t *testing.T) { t.Parallel(); testPurgeParkedKeeps(t, c) })
			t.Run("PurgeParkedGivesOldParksATime", func(t *testing.T) { t.Parallel(); testPurgeParkedBackfill(t, c) })
			t.Run("ParkTimesFollowCancelAndCorruptParks", func(t *testing.T) { t.Parallel(); testParkTimes(t, c) })
			t.Run("HealthReportsMemory", func(t *testing.T) { t.Parallel(); testHealthMemory(t, c) })
		})
	}
}

// parkAll appends ids (with keys spread over the partitions) and parks
// them, partition by partition.
func parkAll(t *testing.T, b *Backend, ids ...string) {
	t.Helper()
	ctx := testCtx(t)
	for i, id := range ids {
		require.NoError(t, b.Append(ctx, outbox.Entry{ID: id, Topic: "t", Key: "key" + strconv.Itoa(i)}))
	}
	for p := range b.Partitions() {
		l := lease(t, b, p, "relay")
		batch, err := b.FindPendingBatch(ctx, l, 1000)
		require.NoError(t, err)
		var fs []outbox.Failure
		for _, e := range batch {
			if slices.Contains(ids, e.ID) {
				fs = append(fs, outbox.Failure{ID: e.ID, Park: true, Error: "poison"})
			}
		}
		require.NoError(t, b.MarkFailed(ctx, l, fs))
		require.NoError(t, b.ReleaseLease(ctx, l))
	}
}

// setParkTime moves the recorded park time of id.
func setParkTime(t *testing.T, c redis.UniversalClient, b *Backend, id string, at time.Time) {
	t.Helper()
	for _, k := range b.parts {
		if s, err := c.ZScore(testCtx(t), k.parkedat, id).Result(); err == nil && s > 0 {
			require.NoError(t, c.ZAdd(testCtx(t), k.parkedat, redis.Z{Score: float64(at.UnixMilli()), Member: id}).Err())
			return
		}
	}
	t.Fatalf("%s has no park time", id)
}

func storedParked(t *testing.T, b *Backend) []string {
	t.Helper()
	page, err := b.Parked(testCtx(t), "", 1000)
	require.NoError(t, err)
	return ids(page)
}

func testPurgeParked(t *testing.T, c redis.UniversalClient) {
	ctx := testCtx(t)
	b := newBackend(t, c, Options{Partitions: 4})
	var old []string
	for i := range 10 {
		old = append(old, fmt.Sprintf("old%02d", i))
	}
	parkAll(t, b, append(slices.Clone(old), "young")...)
	base := time.Now().Add(-48 * time.Hour)
	for i, id := range old {
		setParkTime(t, c, b, id, base.Add(time.Duration(i)*time.Minute))
	}
	before := time.Now().Add(-24 * time.Hour)

	var removed []string
	for calls := 0; ; calls++ {
		got, more, err := b.PurgeParked(ctx, before, 3)
		require.NoError(t, err)
		require.LessOrEqual(t, len(got), 3, "at most limit per call")
		removed = append(removed, got...)
		if !more {
			break
		}
		require.Less(t, calls, 20, "PurgeParked keeps reporting more")
	}
	slices.Sort(removed)
	assert.Equal(t, old, removed, "every entry parked before the bound, once")
	assert.Equal(t, []string{"young"}, storedParked(t, b), "the young park stays")
	for _, id := range old {
		_, err := b.Lookup(ctx, id)
		require.ErrorIs(t, err, outbox.ErrNotFound, "%s is gone as a cancelled entry is", id)
		for _, k := range b.parts {
			n, err := c.HExists(ctx, k.history, id).Result()
			require.NoError(t, err)
			assert.False(t, n, "history of %s left behind", id)
		}
	}
	got, more, err := b.PurgeParked(ctx, before, 3)
	require.NoError(t, err)
	assert.Empty(t, got)
	assert.False(t, more)

	// Within a partition, oldest park first.
	one := newBackend(t, c, Options{Partitions: 1})
	parkAll(t, one, "a", "b", "c")
	setParkTime(t, c, one, "c", base)
	setParkTime(t, c, one, "a", base.Add(time.Minute))
	setParkTime(t, c, one, "b", base.Add(2*time.Minute))
	got, more, err = one.PurgeParked(ctx, before, 2)
	require.NoError(t, err)
	assert.Equal(t, []string{"c", "a"}, got)
	assert.True(t, more)
	_, _, err = one.PurgeParked(ctx, before, 0)
	require.ErrorIs(t, err, outbox.ErrInvalidArgument)
}

// testPurgeParkedRoundRobin: a call that stops at its limit makes the next
// call start at the next partition, so one partition with many parked
// entries does not keep the others waiting.
func testPurgeParkedRoundRobin(t *testing.T, c redis.UniversalClient) {
	ctx := testCtx(t)
	b := newBackend(t, c, Options{Partitions: 2})
	k0, k1 := keyFor(t, 0, 2), keyFor(t, 1, 2)
	for _, e := range []outbox.Entry{{ID: "p0-a", Key: k0}, {ID: "p0-b", Key: k0}, {ID: "p1-a", Key: k1}} {
		e.Topic = "t"
		require.NoError(t, b.Append(ctx, e))
	}
	for p := range 2 {
		l := lease(t, b, p, "relay")
		batch, err := b.FindPendingBatch(ctx, l, 10)
		require.NoError(t, err)
		var fs []outbox.Failure
		for _, e := range batch {
			fs = append(fs, outbox.Failure{ID: e.ID, Park: true, Error: "poison"})
		}
		require.NoError(t, b.MarkFailed(ctx, l, fs))
	}
	setParkTime(t, c, b, "p0-a", time.Now().Add(-3*time.Hour))
	setParkTime(t, c, b, "p0-b", time.Now().Add(-2*time.Hour))
	setParkTime(t, c, b, "p1-a", time.Now().Add(-2*time.Hour))
	var order []string
	for range 3 {
		got, _, err := b.PurgeParked(ctx, time.Now().Add(-time.Hour), 1)
		require.NoError(t, err)
		order = append(order, got...)
	}
	assert.Equal(t, []string{"p0-a", "p1-a", "p0-b"}, order, "the second call starts at partition 1")
}

func testPurgeParkedKeeps(t *testing.T, c redis.UniversalClient) {
	ctx := testCtx(t)
	b := newBackend(t, c, Options{Partitions: 2})
	parkAll(t, b, "requeued", "parked")
	setParkTime(t, c, b, "requeued", time.Now().Add(-48*time.Hour))
	setParkTime(t, c, b, "parked", time.Now().Add(-48*time.Hour))
	n, err := b.Requeue(ctx, "requeued")
	require.NoError(t, err)
	require.Equal(t, 1, n)
	require.NoError(t, b.Append(ctx, outbox.Entry{ID: "pending", Topic: "t"}))
	require.NoError(t, b.Append(ctx, outbox.Entry{ID: "scheduled", Topic: "t", NotBefore: time.Now().Add(time.Hour)}))

	got, more, err := b.PurgeParked(ctx, time.Now().Add(time.Hour), 100)
	require.NoError(t, err)
	assert.Equal(t, []string{"parked"}, got)
	assert.False(t, more)
	for _, id := range []string{"requeued", "pending", "scheduled"} {
		info := lookup(t, b, id)
		assert.False(t, info.Parked, id)
	}
	st, err := b.Stats(ctx)
	require.NoError(t, err)
	assert.Equal(t, int64(3), st.Pending)
	assert.Equal(t, int64(0), st.Parked)

	// A requeued entry parked again has a new park time.
	l := lease(t, b, outbox.PartitionOf("key0", 2), "relay")
	require.NoError(t, b.MarkFailed(ctx, l, []outbox.Failure{{ID: "requeued", Park: true, Error: "again"}}))
	got, _, err = b.PurgeParked(ctx, time.Now().Add(-time.Hour), 100)
	require.NoError(t, err)
	assert.Empty(t, got, "the second park is recent")
}

// testPurgeParkedBackfill: an entry parked by a build that recorded no
// park time gets one (now) from the first purge that sees it.
func testPurgeParkedBackfill(t *testing.T, c redis.UniversalClient) {
	ctx := testCtx(t)
	b := newBackend(t, c, Options{})
	parkAll(t, b, "legacy")
	k := b.parts[0]
	require.NoError(t, c.ZRem(ctx, k.parkedat, "legacy").Err())
	start := serverMillis(t, ctx, c)
	got, more, err := b.PurgeParked(ctx, time.Now().Add(-time.Hour), 10)
	require.NoError(t, err)
	assert.Empty(t, got)
	assert.False(t, more)
	s, err := c.ZScore(ctx, k.parkedat, "legacy").Result()
	require.NoError(t, err, "legacy got a park time")
	assert.GreaterOrEqual(t, int64(s), start)
	got, _, err = b.PurgeParked(ctx, time.Now().Add(time.Hour), 10)
	require.NoError(t, err)
	assert.Equal(t, []string{"legacy"}, got)

	// A park time whose entry is no longer parked (written by hand) is
	// dropped without counting against the limit.
	s2 := newBackend(t, c, Options{})
	parkAll(t, s2, "stale", "kept")
	k = s2.parts[0]
	require.NoError(t, c.ZRem(ctx, k.parked, "stale").Err())
	require.NoError(t, c.ZAdd(ctx, k.parkedat, redis.Z{Score: 1, Member: "stale"}).Err())
	setParkTime(t, c, s2, "kept", time.Now().Add(-48*time.Hour))
	got, more, err = s2.PurgeParked(ctx, time.Now().Add(-time.Hour), 1)
	require.NoError(t, err)
	assert.Equal(t, []string{"kept"}, got)
	assert.False(t, more)
	_, err = c.ZScore(ctx, k.parkedat, "stale").Result()
	require.ErrorIs(t, err, redis.Nil, "the stale park time is dropped")
}

// testParkTimes: Cancel drops a park time, and a corrupt entry the claim
// parks gets one.
func testParkTimes(t *testing.T, c redis.UniversalClient) {
	ctx := testCtx(t)
	b := newBackend(t, c, Options{})
	k := b.parts[0]
	parkAll(t, b, "x")
	_, err := c.ZScore(ctx, k.parkedat, "x").Result()
	require.NoError(t, err, "MarkFailed's park records a time")
	require.NoError(t, b.Cancel(ctx, "x"))
	n, err := c.ZCard(ctx, k.parkedat).Result()
	require.NoError(t, err)
	assert.Zero(t, n, "Cancel drops the park time")

	require.NoError(t, b.Append(ctx, outbox.Entry{ID: "bad", Topic: "t", Key: "k"}))
	require.NoError(t, c.HSet(ctx, k.entries, "bad", "\x02garbage").Err())
	l := lease(t, b, 0, "relay")
	batch, err := b.FetchBatch(ctx, l, 10)
	require.NoError(t, err)
	require.Len(t, batch.Parked, 1)
	_, err = c.ZScore(ctx, k.parkedat, "bad").Result()
	require.NoError(t, err, "the claim's park of a corrupt entry records a time")
}

func testHealthMemory(t *testing.T, c redis.UniversalClient) {
	ctx := testCtx(t)
	b := newBackend(t, c, Options{})
	h, err := b.Health(ctx)
	require.NoError(t, err)
	require.NotNil(t, h.Memory)
	assert.Empty(t, h.Tables)
	assert.Positive(t, h.Memory.UsedBytes)
	assert.Positive(t, h.Memory.RSSBytes)
	assert.Positive(t, h.Memory.Fragmentation)
	// The server's own figures, read the same way (a sum over the masters
	// on a Cluster): the used memory moves between the two reads, so
	// compare within a margin.
	var used atomic.Int64
	if cc, ok := c.(*redis.ClusterClient); ok {
		require.NoError(t, cc.ForEachMaster(ctx, func(ctx context.Context, n *redis.Client) error {
			used.Add(parseMemoryInfo("", n.Info(ctx, "memory").Val()).used)
			return nil
		}))
	} else {
		used.Store(parseMemoryInfo("", c.Info(ctx, "memory").Val()).used)
	}
	assert.InEpsilon(t, float64(used.Load()), float64(h.Memory.UsedBytes), 0.5)
	b.Close()
	_, err = b.Health(ctx)
	require.ErrorIs(t, err, outbox.ErrClosed)
	_, _, err = b.PurgeParked(ctx, time.Now(), 1)
	require.ErrorIs(t, err, outbox.ErrClosed)
}

func TestParseMemoryInfoAndWarnings(t *testing.T) {
	t.Parallel()
	info := "# Memory\r\nused_memory:134217728\r\nused_memory_rss:268435456\r\nmaxmemory:140000000\r\nmaxmemory_policy:allkeys-lru\r\nmem_fragmentation_ratio:2.00\r\n"
	n := parseMemoryInfo("10.0.0.1:7000", info)
	assert.Equal(t, nodeMemory{node: "10.0.0.1:7000", used: 128 << 20, rss: 256 << 20, maxmemory: 140000000, fragmentation: 2, hasFragmentation: true, policy: "allkeys-lru"}, n)
	var codes []string
	for _, w := range n.warnings() {
		codes = append(codes, w.Code)
		assert.Equal(t, "10.0.0.1:7000", w.Object)
		assert.Contains(t, w.Message, "10.0.0.1:7000")
	}
	assert.Equal(t, []string{"memory-fragmentation", "maxmemory-near", "maxmemory-policy-evicts"}, codes)

	// A small data set's high ratio, no maxmemory and noeviction: nothing.
	quiet := parseMemoryInfo("", "used_memory:1000000\r\nused_memory_rss:7000000\r\nmaxmemory:0\r\nmaxmemory_policy:noeviction\r\nmem_fragmentation_ratio:7.00\r\n")
	assert.Empty(t, quiet.warnings())
	// volatile-* evicts leases.
	v := parseMemoryInfo("", "used_memory:1000\r\nmaxmemory_policy:volatile-ttl\r\n")
	require.Len(t, v.warnings(), 1)
	assert.Contains(t, v.warnings()[0].Message, "duplicates")
}

// TestHealthWarnsOnAPrivateServer starts a redis-server of its own (the
// shared one's configuration is never changed), sets an evicting policy
// and a maxmemory just above what it uses, and reads the warnings.
func TestHealthWarnsOnAPrivateServer(t *testing.T) {
	t.Parallel()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Skip("redis-server is not installed: the warning test needs a private server")
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	port := l.Addr().(*net.TCPAddr).Port
	require.NoError(t, l.Close())
	cmd := exec.Command(bin, "--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--daemonize", "no")
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:" + strconv.Itoa(port)})
	t.Cleanup(func() { _ = c.Close() })
	ctx := testCtx(t)
	for deadline := time.Now().Add(10 * time.Second); c.Ping(ctx).Err() != nil; time.Sleep(20 * time.Millisecond) {
		require.False(t, time.Now().After(deadline), "the private redis-server did not answer")
	}
	b, err := New(ctx, c, Options{Prefix: "p:{h}", Partitions: 1})
	require.NoError(t, err)
	h, err := b.Health(ctx)
	require.NoError(t, err)
	assert.Empty(t, h.Warnings, "a fresh server with noeviction and no maxmemory")

	used := parseMemoryInfo("", c.Info(ctx, "memory").Val()).used
	require.NoError(t, c.ConfigSet(ctx, "maxmemory-policy", "allkeys-lru").Err())
	require.NoError(t, c.ConfigSet(ctx, "maxmemory", strconv.FormatInt(used+used/50, 10)).Err())
	h, err = b.Health(ctx)
	require.NoError(t, err)
	var codes []string
	for _, w := range h.Warnings {
		codes = append(codes, w.Code)
		assert.Equal(t, "", w.Object, "a standalone server is the whole store")
	}
	assert.ElementsMatch(t, []string{"maxmemory-near", "maxmemory-policy-evicts"}, codes)
	for _, w := range h.Warnings {
		if w.Code == "maxmemory-policy-evicts" {
			assert.True(t, strings.Contains(w.Message, "allkeys-lru") && strings.Contains(w.Message, "noeviction"), w.Message)
		}
	}
}
