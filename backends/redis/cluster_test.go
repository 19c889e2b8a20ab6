package redisoutbox

import (
	"bytes"
	"fmt"
	"log/slog"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/outboxrelay/outbox"
)

func TestClusterPartitionsSpreadWithoutCrossSlot(t *testing.T) {
	t.Parallel()
	c := clusterClient(t)
	cc := c.(*redis.ClusterClient)
	ctx := testCtx(t)
	const parts = 48 // enough that every master gets some, whatever the random prefix
	b := newBackend(t, c, Options{Partitions: parts})

	// Every partition's keys share one slot; the partitions use many slots
	// on every master.
	slots := map[int64]bool{}
	nodes := map[string]bool{}
	for _, k := range b.parts {
		slot, err := c.ClusterKeySlot(ctx, k.pending).Result()
		require.NoError(t, err)
		for _, key := range []string{k.entries, k.inflight, k.parked, k.keyorder, k.lease, k.leasever, k.seq, k.keyseq, k.history, k.paused} {
			s, err := c.ClusterKeySlot(ctx, key).Result()
			require.NoError(t, err)
			require.Equal(t, slot, s, key)
		}
		slots[slot] = true
		n, err := cc.MasterForKey(ctx, k.pending)
		require.NoError(t, err)
		nodes[n.Options().Addr] = true
	}
	assert.Greater(t, len(slots), parts/2, "partitions spread over slots")
	assert.Len(t, nodes, 3, "partitions land on every master")

	// Many keys over all partitions: standalone Append and per-partition
	// transactions work, every partition drains, nothing raises CROSSSLOT.
	var all []outbox.Entry
	for i := range 200 {
		all = append(all, outbox.Entry{ID: fmt.Sprintf("c%03d", i), Topic: "t", Key: "key" + strconv.Itoa(i%40)})
	}
	require.NoError(t, b.Append(ctx, all[:100]...))
	for _, e := range all[100:] {
		_, err := c.TxPipelined(ctx, func(pipe redis.Pipeliner) error {
			pipe.Set(ctx, b.HashTag(e.Key)+":business:"+e.ID, "state", time.Minute)
			return b.AppendInTx(ctx, pipe, e)
		})
		require.NoError(t, err)
		t.Cleanup(func() { c.Del(ctx, b.HashTag(e.Key)+":business:"+e.ID) })
	}
	seen := 0
	for p := range parts {
		l, err := b.AcquireLease(ctx, p, "me", time.Minute)
		require.NoError(t, err)
		batch, err := b.FindPendingBatch(ctx, l, 500)
		require.NoError(t, err)
		seen += len(batch)
		if len(batch) > 0 {
			require.NoError(t, b.MarkFailed(ctx, l, []outbox.Failure{{ID: batch[0].ID, Delay: 0}}))
			require.NoError(t, b.Release(ctx, l, ids(batch[1:])))
		}
		require.NoError(t, b.ReleaseLease(ctx, l))
	}
	assert.Equal(t, 200, seen)
	st, err := b.Stats(ctx)
	require.NoError(t, err)
	assert.Equal(t, int64(200), st.Pending)
	require.NoError(t, b.Cancel(ctx, "c007"))
	_, err = b.Parked(ctx, "", 10)
	require.NoError(t, err)

	// A transaction that would span slots fails as a whole at Exec: go-redis
	// refuses it before sending anything, so nothing is written.
	span := []outbox.Entry{{ID: "span1", Topic: "t", Key: "key0"}, {ID: "span2", Topic: "t", Key: "key1"}}
	require.NotEqual(t, b.HashTag(span[0].Key), b.HashTag(span[1].Key))
	pipe := c.TxPipeline()
	require.NoError(t, b.AppendInTx(ctx, pipe, span...))
	_, err = pipe.Exec(ctx)
	require.ErrorIs(t, err, redis.ErrCrossSlot)
	err = b.Cancel(ctx, "span1")
	require.ErrorIs(t, err, outbox.ErrNotFound, "nothing of a refused transaction is written")
	// A plain pipeline writes each partition's entries atomically.
	pipe = c.Pipeline()
	require.NoError(t, b.AppendInTx(ctx, pipe, span...))
	_, err = pipe.Exec(ctx)
	require.NoError(t, err)
	require.NoError(t, b.Cancel(ctx, "span1"))
	require.NoError(t, b.Cancel(ctx, "span2"))
}

func TestSurvivesScriptFlush(t *testing.T) {
	t.Parallel()
	for _, tg := range targets {
		t.Run(tg.name, func(t *testing.T) {
			t.Parallel()
			c := tg.client(t)
			ctx := testCtx(t)
			b := newBackend(t, c, Options{})
			require.NoError(t, c.ScriptFlush(ctx).Err())
			// Inside the caller's MULTI: the business write and the entry
			// commit together even though the server forgot the scripts.
			_, err := c.TxPipelined(ctx, func(pipe redis.Pipeliner) error {
				pipe.Set(ctx, b.parts[0].tag+":business", "v", time.Minute)
				return b.AppendInTx(ctx, pipe, outbox.Entry{ID: "in-tx", Topic: "t"})
			})
			require.NoError(t, err)
			t.Cleanup(func() { c.Del(ctx, b.parts[0].tag+":business") })
			require.NoError(t, c.ScriptFlush(ctx).Err())
			require.NoError(t, b.Append(ctx, outbox.Entry{ID: "standalone", Topic: "t"}))
			require.NoError(t, c.ScriptFlush(ctx).Err())
			l, err := b.AcquireLease(ctx, 0, "me", time.Minute)
			require.NoError(t, err)
			require.NoError(t, c.ScriptFlush(ctx).Err())
			batch, err := b.FindPendingBatch(ctx, l, 10)
			require.NoError(t, err)
			assert.Equal(t, []string{"in-tx", "standalone"}, ids(batch))
			require.NoError(t, c.ScriptFlush(ctx).Err())
			st, err := b.Stats(ctx) // pipelined path
			require.NoError(t, err)
			assert.Equal(t, int64(2), st.Pending)
		})
	}
}

func TestWarnsWhenEvictionCanLoseEntries(t *testing.T) {
	t.Parallel()
	srv := startPrivateRedis(t, "--maxmemory-policy", "allkeys-lru")
	var logs bytes.Buffer
	b, err := New(testCtx(t), srv, Options{Partitions: 1, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	require.NoError(t, err)
	defer b.Close()
	assert.Contains(t, logs.String(), "level=ERROR")
	assert.Contains(t, logs.String(), "allkeys-lru")
	assert.Contains(t, logs.String(), "noeviction")

	require.NoError(t, srv.ConfigSet(testCtx(t), "maxmemory-policy", "volatile-ttl").Err())
	logs.Reset()
	b2, err := New(testCtx(t), srv, Options{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	require.NoError(t, err)
	defer b2.Close()
	assert.Contains(t, logs.String(), "level=WARN")
	assert.Contains(t, logs.String(), "lease")

	require.NoError(t, srv.ConfigSet(testCtx(t), "maxmemory-policy", "noeviction").Err())
	logs.Reset()
	b3, err := New(testCtx(t), srv, Options{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	require.NoError(t, err)
	defer b3.Close()
	assert.Empty(t, logs.String())
}

// TestCrashWithAppendfsyncAlways kills a private Redis (appendonly yes,
// appendfsync always) with SIGKILL mid-work: every acknowledged append,
// claim and outcome survives, the scripts are reloaded transparently, and
// the lease version keeps growing.
func TestCrashWithAppendfsyncAlways(t *testing.T) {
	t.Parallel()
	c, restart := startRestartableRedis(t, "--appendonly", "yes", "--appendfsync", "always")
	ctx := testCtx(t)
	b := newBackend(t, c, Options{})
	for i := range 5 {
		require.NoError(t, b.Append(ctx, outbox.Entry{ID: "d" + strconv.Itoa(i), Topic: "t", Key: "k"}))
	}
	l, err := b.AcquireLease(ctx, 0, "before", 100*time.Millisecond)
	require.NoError(t, err)
	batch, err := b.FindPendingBatch(ctx, l, 2)
	require.NoError(t, err)
	require.NoError(t, b.MarkSent(ctx, l, ids(batch[:1])))

	restart()

	time.Sleep(150 * time.Millisecond) // let the old lease expire
	l2, err := b.AcquireLease(ctx, 0, "after", time.Minute)
	require.NoError(t, err)
	assert.Greater(t, l2.Version, l.Version)
	batch, err = b.FindPendingBatch(ctx, l2, 10)
	require.NoError(t, err)
	assert.Equal(t, []string{"d1", "d2", "d3", "d4"}, ids(batch), "the unfinished claim comes back first, the sent entry does not")
}
