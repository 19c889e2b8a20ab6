package redisoutbox

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/outboxrelay/outbox"
)

// A key of the outbox of the wrong type (or a counter that holds no
// integer) gives, on every call that uses it, an error that names the key,
// its type and the fix, never a raw script error; the other partitions
// keep working.
func TestWrongTypedKeys(t *testing.T) {
	t.Parallel()
	for _, tg := range targets {
		t.Run(tg.name, func(t *testing.T) {
			t.Parallel()
			c := tg.client(t)
			for _, tc := range wrongKeyCases {
				t.Run(tc.name, func(t *testing.T) { t.Parallel(); testWrongKey(t, c, tc) })
			}
			t.Run("GarbageLease", func(t *testing.T) { t.Parallel(); testGarbageLease(t, c) })
			t.Run("Meta", func(t *testing.T) { t.Parallel(); testWrongMeta(t, c) })
		})
	}
}

// op is one call of the backend on partition 0 with lease l (held before
// the key was damaged), or outbox-wide.
type op struct {
	name string
	call func(ctx context.Context, b *Backend, l outbox.Lease) error
}

var (
	opAppend = op{"Append", func(ctx context.Context, b *Backend, _ outbox.Lease) error {
		return b.Append(ctx, outbox.Entry{ID: "new", Topic: "t", Key: "k0"})
	}}
	opAcquire = op{"AcquireLease", func(ctx context.Context, b *Backend, _ outbox.Lease) error {
		_, err := b.AcquireLease(ctx, 0, "me", time.Minute)
		return err
	}}
	opRenew = op{"RenewLease", func(ctx context.Context, b *Backend, l outbox.Lease) error {
		_, err := b.RenewLease(ctx, l, time.Minute)
		return err
	}}
	opReleaseLease = op{"ReleaseLease", func(ctx context.Context, b *Backend, l outbox.Lease) error { return b.ReleaseLease(ctx, l) }}
	opFetch        = op{"FetchBatch", func(ctx context.Context, b *Backend, l outbox.Lease) error {
		_, err := b.FetchBatch(ctx, l, 10)
		return err
	}}
	opFind = op{"FindPendingBatch", func(ctx context.Context, b *Backend, l outbox.Lease) error {
		_, err := b.FindPendingBatch(ctx, l, 10)
		return err
	}}
	opMarkSent = op{"MarkSent", func(ctx context.Context, b *Backend, l outbox.Lease) error {
		return b.MarkSent(ctx, l, []string{"x"})
	}}
	opRetry = op{"MarkFailed", func(ctx context.Context, b *Backend, l outbox.Lease) error {
		return b.MarkFailed(ctx, l, []outbox.Failure{{ID: "x", Error: "e"}})
	}}
	opPark = op{"MarkFailedPark", func(ctx context.Context, b *Backend, l outbox.Lease) error {
		return b.MarkFailed(ctx, l, []outbox.Failure{{ID: "x", Error: "e", Park: true}})
	}}
	opRelease = op{"Release", func(ctx context.Context, b *Backend, l outbox.Lease) error { return b.Release(ctx, l, []string{"x"}) }}
	opStats   = op{"Stats", func(ctx context.Context, b *Backend, _ outbox.Lease) error {
		_, err := b.Stats(ctx)
		return err
	}}
	opPartitionStats = op{"PartitionStats", func(ctx context.Context, b *Backend, _ outbox.Lease) error {
		_, err := b.PartitionStats(ctx)
		return err
	}}
	opParked = op{"Parked", func(ctx context.Context, b *Backend, _ outbox.Lease) error {
		_, err := b.Parked(ctx, "", 10)
		return err
	}}
	opLookup = op{"Lookup", func(ctx context.Context, b *Backend, _ outbox.Lease) error {
		_, err := b.Lookup(ctx, "x")
		return err
	}}
	opRequeue = op{"Requeue", func(ctx context.Context, b *Backend, _ outbox.Lease) error {
		_, err := b.Requeue(ctx, "p")
		return err
	}}
	opCancel    = op{"Cancel", func(ctx context.Context, b *Backend, _ outbox.Lease) error { return b.Cancel(ctx, "x") }}
	opHeartbeat = op{"Heartbeat", func(ctx context.Context, b *Backend, _ outbox.Lease) error {
		_, err := b.Heartbeat(ctx, outbox.Member{Owner: "me"}, time.Minute)
		return err
	}}
	opLeave = op{"Leave", func(ctx context.Context, b *Backend, _ outbox.Lease) error { return b.Leave(ctx, "me") }}
)

type wrongKeyCase struct {
	name    string
	key     func(b *Backend) string
	damage  func(ctx context.Context, c redis.UniversalClient, key string) error
	noLease bool   // do not acquire partition 0's lease before the damage
	want    string // what the error says of the key
	ops     []op
	// fix repairs the key as the error says; nil when that loses the
	// entries (then the test does not check them after).
	fix func(ctx context.Context, c redis.UniversalClient, key string) error
}

func del(ctx context.Context, c redis.UniversalClient, key string) error {
	return c.Del(ctx, key).Err()
}

func set1000(ctx context.Context, c redis.UniversalClient, key string) error {
	if err := c.Del(ctx, key).Err(); err != nil {
		return err
	}
	return c.Set(ctx, key, 1000, 0).Err()
}

func asString(ctx context.Context, c redis.UniversalClient, key string) error {
	if err := c.Del(ctx, key).Err(); err != nil {
		return err
	}
	return c.Set(ctx, key, "x", 0).Err()
}

func asList(ctx context.Context, c redis.UniversalClient, key string) error {
	if err := c.Del(ctx, key).Err(); err != nil {
		return err
	}
	return c.RPush(ctx, key, "x").Err()
}

func asHash(ctx context.Context, c redis.UniversalClient, key string) error {
	if err := c.Del(ctx, key).Err(); err != nil {
		return err
	}
	return c.HSet(ctx, key, "x", "y").Err()
}

func asText(ctx context.Context, c redis.UniversalClient, key string) error {
	return c.Set(ctx, key, "not a number", 0).Err()
}

var wrongKeyCases = []wrongKeyCase{
	{"Entries", func(b *Backend) string { return b.parts[0].entries }, asString, false, "is a Redis string, but the outbox keeps the partition's entries there as a hash",
		[]op{opAppend, opFetch, opFind, opMarkSent, opRetry, opPark, opLookup, opCancel, opParked, opRequeue}, nil},
	{"Pending", func(b *Backend) string { return b.parts[0].pending }, asString, false, "is a Redis string, but the outbox keeps the partition's pending entries there as a zset",
		[]op{opAppend, opFetch, opMarkSent, opRetry, opStats, opPartitionStats, opLookup, opCancel}, nil},
	{"Parked", func(b *Backend) string { return b.parts[0].parked }, asList, false, "is a Redis list, but the outbox keeps the partition's parked entries there as a zset",
		[]op{opPark, opStats, opParked, opRequeue, opCancel}, del},
	{"KeyOrder", func(b *Backend) string { return b.parts[0].keyorder }, asHash, false, "is a Redis hash, but the outbox keeps the partition's key order there as a zset",
		[]op{opFetch, opMarkSent, opRetry, opPark, opCancel}, del},
	{"Lease", func(b *Backend) string { return b.parts[0].lease }, asHash, false, "is a Redis hash, but the outbox keeps the partition's lease there as a string",
		[]op{opAcquire, opRenew, opReleaseLease, opFetch, opMarkSent, opRetry, opRelease, opStats, opPartitionStats}, del},
	{"LeaseVersion", func(b *Backend) string { return b.parts[0].leasever }, asList, true, "is a Redis list, but the outbox keeps the partition's lease version counter there as a string",
		[]op{opAcquire}, set1000},
	{"LeaseVersionText", func(b *Backend) string { return b.parts[0].leasever }, asText, true, `holds "not a number", but the outbox keeps the partition's lease version counter there as an integer`,
		[]op{opAcquire}, set1000},
	{"Sequence", func(b *Backend) string { return b.parts[0].seq }, asList, false, "is a Redis list, but the outbox keeps the partition's append sequence counter there as a string",
		[]op{opAppend, opRequeue}, set1000},
	{"SequenceText", func(b *Backend) string { return b.parts[0].seq }, asText, false, `holds "not a number", but the outbox keeps the partition's append sequence counter there as an integer`,
		[]op{opAppend, opRequeue}, set1000},
	{"Members", func(b *Backend) string { return b.members }, asString, false, "is a Redis string, but the outbox keeps the relays' membership records there as a hash",
		[]op{opHeartbeat, opLeave}, del},
}

func testWrongKey(t *testing.T, c redis.UniversalClient, tc wrongKeyCase) {
	ctx := testCtx(t)
	b := newBackend(t, c, Options{Partitions: 2})
	require.Equal(t, 0, outbox.PartitionOf("k0", 2))
	// x pending (keyed, marked by a retry), p parked, both in partition 0.
	require.NoError(t, b.Append(ctx, outbox.Entry{ID: "x", Topic: "t", Key: "k0"}, outbox.Entry{ID: "p", Topic: "t", Key: "k0"}))
	l, err := b.AcquireLease(ctx, 0, "me", time.Minute)
	require.NoError(t, err)
	require.NoError(t, b.MarkFailed(ctx, l, []outbox.Failure{{ID: "x", Error: "e", Delay: -time.Hour}, {ID: "p", Error: "e", Park: true}}))
	if tc.noLease {
		require.NoError(t, b.ReleaseLease(ctx, l))
	}
	key := tc.key(b)
	require.NoError(t, tc.damage(ctx, c, key))
	for _, o := range tc.ops {
		err := o.call(ctx, b, l)
		require.Error(t, err, o.name)
		msg := err.Error()
		assert.True(t, strings.HasPrefix(msg, "redisoutbox: "+o.name+": ") || strings.HasPrefix(msg, "redisoutbox: "+strings.TrimSuffix(o.name, "Park")+": "), "%s: %s", o.name, msg)
		assert.Contains(t, msg, `"`+key+`"`, "%s names the key", o.name)
		assert.Contains(t, msg, tc.want, o.name)
		assert.NotContains(t, msg, "script:", "%s: no raw script error", o.name)
	}

	// The failed calls wrote nothing: once the key is fixed, x is as it
	// was (pending, attempted once) and p still parked (unless the fix
	// dropped the parked set).
	if tc.fix != nil {
		require.NoError(t, tc.fix(ctx, c, key))
		info, err := b.Lookup(ctx, "x")
		require.NoError(t, err)
		assert.False(t, info.Parked)
		assert.Equal(t, 1, info.Attempts)
		if tc.name != "Parked" {
			info, err = b.Lookup(ctx, "p")
			require.NoError(t, err)
			assert.True(t, info.Parked)
		}
		require.NoError(t, b.Append(ctx, outbox.Entry{ID: "new", Topic: "t", Key: "k0"}))
		l, err := b.AcquireLease(ctx, 0, "you", time.Minute)
		if tc.name != "Lease" && !tc.noLease {
			require.ErrorIs(t, err, outbox.ErrLeaseHeld)
			l, err = b.AcquireLease(ctx, 0, "me", time.Minute)
		}
		require.NoError(t, err)
		batch, err := b.FetchBatch(ctx, l, 10)
		require.NoError(t, err)
		assert.Equal(t, []string{"x"}, ids(batch.Entries), "x, attempted, holds back new")
	}

	// The other partition keeps working.
	k1 := keyFor(t, 1, 2)
	require.NoError(t, b.Append(ctx, outbox.Entry{ID: "other", Topic: "t", Key: k1}))
	l1, err := b.AcquireLease(ctx, 1, "me", time.Minute)
	require.NoError(t, err)
	batch, err := b.FetchBatch(ctx, l1, 10)
	require.NoError(t, err)
	assert.Equal(t, []string{"other"}, ids(batch.Entries))
	require.NoError(t, b.MarkSent(ctx, l1, ids(batch.Entries)))
}

func testGarbageLease(t *testing.T, c redis.UniversalClient) {
	ctx := testCtx(t)
	b := newBackend(t, c, Options{})
	require.NoError(t, c.Set(ctx, b.parts[0].lease, "nonsense", 0).Err())
	_, err := b.AcquireLease(ctx, 0, "me", time.Minute)
	require.Error(t, err)
	assert.Contains(t, err.Error(), `"`+b.parts[0].lease+`"`)
	assert.Contains(t, err.Error(), "DEL "+b.parts[0].lease)
	_, err = b.PartitionStats(ctx)
	require.Error(t, err)
	assert.Contains(t, err.Error(), `"`+b.parts[0].lease+`"`)
	require.NoError(t, c.Del(ctx, b.parts[0].lease).Err())
	_, err = b.AcquireLease(ctx, 0, "me", time.Minute)
	require.NoError(t, err)
}

func testWrongMeta(t *testing.T, c redis.UniversalClient) {
	ctx := testCtx(t)
	b := newBackend(t, c, Options{})
	require.NoError(t, asList(ctx, c, b.meta))
	_, err := New(ctx, c, Options{Prefix: b.opts.Prefix})
	require.Error(t, err)
	assert.Contains(t, err.Error(), `"`+b.meta+`"`)
	assert.Contains(t, err.Error(), "is a Redis list, but the outbox keeps the outbox's partition count there as a hash")
	assert.NotContains(t, err.Error(), "script:")

	require.NoError(t, c.Del(ctx, b.meta).Err())
	require.NoError(t, c.HSet(ctx, b.meta, "partitions", "lots").Err())
	_, err = New(ctx, c, Options{Prefix: b.opts.Prefix})
	require.Error(t, err)
	assert.Contains(t, err.Error(), `"`+b.meta+`"`)
	assert.Contains(t, err.Error(), "lots")
}

// An outbox append inside the caller's EXEC that meets a wrong-typed key
// fails alone (Redis applies the rest); CheckExec names the append's keys.
func TestWrongTypedKeyInExec(t *testing.T) {
	t.Parallel()
	c := standaloneClient(t)
	ctx := testCtx(t)
	b := newBackend(t, c, Options{})
	require.NoError(t, asString(ctx, c, b.parts[0].pending))
	biz := b.HashTag("k") + ":business"
	t.Cleanup(func() { c.Del(context.Background(), biz) })
	err := CheckExec(c.TxPipelined(ctx, func(pipe redis.Pipeliner) error {
		pipe.Set(ctx, biz, "paid", time.Minute)
		return b.AppendInTx(ctx, pipe, outbox.Entry{ID: "x", Topic: "t", Key: "k"})
	}))
	var ee *ExecError
	require.ErrorAs(t, err, &ee)
	assert.Contains(t, err.Error(), "outbox append")
	assert.Contains(t, err.Error(), b.parts[0].pending)
	assert.Contains(t, err.Error(), "Backend.Append")
	// Backend.Append names the key and the fix.
	err = b.Append(ctx, outbox.Entry{ID: "x", Topic: "t", Key: "k"})
	require.Error(t, err)
	assert.Contains(t, err.Error(), `the key "`+b.parts[0].pending+`" is a Redis string`)
}
