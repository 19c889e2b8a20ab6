package redisoutbox

import (
	"context"
	"encoding/binary"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/outboxrelay/outbox"
)

func TestMembership(t *testing.T) {
	t.Parallel()
	for _, tg := range targets {
		t.Run(tg.name, func(t *testing.T) {
			t.Parallel()
			c := tg.client(t)
			t.Run("HeartbeatListsLiveMembersByOwner", func(t *testing.T) { t.Parallel(); testHeartbeat(t, c) })
			t.Run("ExpiredRecordsAreDeletedBoundedly", func(t *testing.T) { t.Parallel(); testHeartbeatExpiry(t, c) })
			t.Run("Leave", func(t *testing.T) { t.Parallel(); testLeave(t, c) })
		})
	}
}

// serverMillis is the server's TIME in Unix ms.
func serverMillis(t *testing.T, ctx context.Context, c redis.UniversalClient) int64 {
	t.Helper()
	now, err := c.Time(ctx).Result()
	require.NoError(t, err)
	return now.UnixMilli()
}

func owners(ms []outbox.Member) []string {
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = m.Owner
	}
	return out
}

func testHeartbeat(t *testing.T, c redis.UniversalClient) {
	ctx := testCtx(t)
	b := newBackend(t, c, Options{Partitions: 4})
	const ttl = time.Minute
	before := serverMillis(t, ctx, c)
	in := outbox.Member{Owner: "relay-b", Partitions: []int{1, 3}, MaxPartitions: 2, Expires: time.Unix(1, 0)}
	got, err := b.Heartbeat(ctx, in, ttl)
	require.NoError(t, err)
	after := serverMillis(t, ctx, c)
	require.Len(t, got, 1)
	assert.Equal(t, "relay-b", got[0].Owner)
	assert.Equal(t, []int{1, 3}, got[0].Partitions)
	assert.Equal(t, 2, got[0].MaxPartitions)
	exp := got[0].Expires.UnixMilli()
	assert.GreaterOrEqual(t, exp, before+ttl.Milliseconds(), "expires ttl after the server's time, not the caller's Expires")
	assert.LessOrEqual(t, exp, after+ttl.Milliseconds())
	got[0].Partitions[0] = 99 // the returned slice is the caller's
	in.Partitions[1] = 98     // the given one is not retained

	got, err = b.Heartbeat(ctx, outbox.Member{Owner: "relay-a"}, ttl)
	require.NoError(t, err)
	require.Equal(t, []string{"relay-a", "relay-b"}, owners(got), "sorted by owner")
	assert.Empty(t, got[0].Partitions)
	assert.Equal(t, 0, got[0].MaxPartitions)
	assert.Equal(t, []int{1, 3}, got[1].Partitions)

	// A heartbeat replaces the owner's record.
	got, err = b.Heartbeat(ctx, outbox.Member{Owner: "relay-b", Partitions: []int{0, 2}}, ttl)
	require.NoError(t, err)
	require.Equal(t, []string{"relay-a", "relay-b"}, owners(got))
	assert.Equal(t, []int{0, 2}, got[1].Partitions)
	assert.Equal(t, 0, got[1].MaxPartitions)

	n, err := c.HLen(ctx, b.members).Result()
	require.NoError(t, err)
	assert.EqualValues(t, 2, n, "one record per owner")
}

// memberRecord is a record as heartbeat.lua writes it.
func memberRecord(expires int64, max int, partitions ...int) string {
	r := []byte{memberRecordV1}
	r = binary.BigEndian.AppendUint64(r, uint64(expires))
	r = binary.BigEndian.AppendUint32(r, uint32(max))
	for _, p := range partitions {
		r = binary.BigEndian.AppendUint32(r, uint32(p))
	}
	return string(r)
}

func testHeartbeatExpiry(t *testing.T, c redis.UniversalClient) {
	ctx := testCtx(t)
	b := newBackend(t, c, Options{Partitions: 2})
	now := serverMillis(t, ctx, c)
	// 250 expired records (relays that stopped without Leave), one cut
	// short, and a live record of a later format (unknown version).
	records := map[string]any{
		"junk":   "\x01short",
		"future": "\x02" + memberRecord(now+time.Hour.Milliseconds(), 0)[1:] + "more",
	}
	for i := range 250 {
		records[fmt.Sprintf("gone-%03d", i)] = memberRecord(now-1, 1, 0)
	}
	require.NoError(t, c.HSet(ctx, b.members, records).Err())

	count := func() int64 {
		n, err := c.HLen(ctx, b.members).Result()
		require.NoError(t, err)
		return n
	}
	got, err := b.Heartbeat(ctx, outbox.Member{Owner: "live"}, time.Minute)
	require.NoError(t, err)
	assert.Equal(t, []string{"live"}, owners(got), "expired, malformed and unknown records are not returned")
	assert.EqualValues(t, 252+1-100, count(), "at most 100 expired records are deleted per call")
	for range 2 {
		_, err = b.Heartbeat(ctx, outbox.Member{Owner: "live"}, time.Minute)
		require.NoError(t, err)
	}
	assert.EqualValues(t, 2, count(), "later calls delete the rest; the live record of a later format stays")
	ok, err := c.HExists(ctx, b.members, "future").Result()
	require.NoError(t, err)
	assert.True(t, ok)
}

func testLeave(t *testing.T, c redis.UniversalClient) {
	ctx := testCtx(t)
	b := newBackend(t, c, Options{Partitions: 2})
	for _, o := range []string{"a", "b", "c"} {
		_, err := b.Heartbeat(ctx, outbox.Member{Owner: o, Partitions: []int{1}}, time.Minute)
		require.NoError(t, err)
	}
	require.NoError(t, b.Leave(ctx, "b"))
	require.NoError(t, b.Leave(ctx, "b"), "leaving twice is a no-op")
	require.NoError(t, b.Leave(ctx, "never-joined"))
	require.NoError(t, b.Leave(ctx, ""))
	got, err := b.Heartbeat(ctx, outbox.Member{Owner: "a"}, time.Minute)
	require.NoError(t, err)
	assert.Equal(t, []string{"a", "c"}, owners(got))
}

// TestOutboxKeysShareThePrefixSlot: the meta and members keys are in the
// slot of the prefix's own tag, not a partition's.
func TestOutboxKeysShareThePrefixSlot(t *testing.T) {
	t.Parallel()
	c := clusterClient(t)
	ctx := testCtx(t)
	prefix := uniquePrefix() + ":x" // "test:{obXXXXXXXXXXXX}:x"
	tag := prefix[strings.IndexByte(prefix, '{') : strings.IndexByte(prefix, '}')+1]
	b := newBackend(t, c, Options{Partitions: 2, Prefix: prefix})
	assert.Equal(t, prefix+":meta", b.meta)
	assert.Equal(t, prefix+":members", b.members)
	want, err := c.ClusterKeySlot(ctx, tag).Result()
	require.NoError(t, err)
	for _, k := range []string{b.meta, b.members, b.memberInfo, b.pauses} {
		slot, err := c.ClusterKeySlot(ctx, k).Result()
		require.NoError(t, err)
		assert.Equal(t, want, slot, k)
	}
	_, err = b.Heartbeat(ctx, outbox.Member{Owner: "me", Partitions: []int{0, 1}}, time.Minute)
	require.NoError(t, err)
}

// TestArgumentChecks: every method checks its arguments with the shared
// outbox.Check* functions before any round trip, and wraps their errors
// with the package and the operation.
func TestArgumentChecks(t *testing.T) {
	t.Parallel()
	c := standaloneClient(t)
	ctx := testCtx(t)
	b := newBackend(t, c, Options{Partitions: 2})
	out := outbox.Lease{Partition: 2, Owner: "me", Version: 1}
	in := outbox.Lease{Partition: 1, Owner: "me", Version: 1}
	for _, tc := range []struct {
		op   string
		call func() error
		want error
	}{
		{"AcquireLease", func() error { _, err := b.AcquireLease(ctx, 2, "me", time.Minute); return err }, outbox.CheckAcquire(2, 2, "me", time.Minute)},
		{"AcquireLease", func() error { _, err := b.AcquireLease(ctx, 0, "", time.Minute); return err }, outbox.CheckAcquire(2, 0, "", time.Minute)},
		{"AcquireLease", func() error { _, err := b.AcquireLease(ctx, 0, "me", 0); return err }, outbox.CheckAcquire(2, 0, "me", 0)},
		{"RenewLease", func() error { _, err := b.RenewLease(ctx, in, -time.Second); return err }, outbox.CheckRenew(2, in, -time.Second)},
		{"RenewLease", func() error { _, err := b.RenewLease(ctx, out, time.Second); return err }, outbox.CheckRenew(2, out, time.Second)},
		{"ReleaseLease", func() error { return b.ReleaseLease(ctx, out) }, outbox.CheckPartition(2, 2)},
		{"FindPendingBatch", func() error { _, err := b.FindPendingBatch(ctx, in, 0); return err }, outbox.CheckFetch(2, in, 0)},
		{"FindPendingBatch", func() error { _, err := b.FindPendingBatch(ctx, out, 10); return err }, outbox.CheckFetch(2, out, 10)},
		{"MarkSent", func() error { return b.MarkSent(ctx, out, []string{"x"}) }, outbox.CheckPartition(2, 2)},
		{"MarkFailed", func() error { return b.MarkFailed(ctx, out, []outbox.Failure{{ID: "x"}}) }, outbox.CheckPartition(2, 2)},
		{"Release", func() error { return b.Release(ctx, out, []string{"x"}) }, outbox.CheckPartition(2, 2)},
		{"Heartbeat", func() error { _, err := b.Heartbeat(ctx, outbox.Member{}, time.Minute); return err }, outbox.CheckMember(2, outbox.Member{}, time.Minute)},
		{"Heartbeat", func() error {
			_, err := b.Heartbeat(ctx, outbox.Member{Owner: "me", Partitions: []int{0, 2}}, time.Minute)
			return err
		}, outbox.CheckMember(2, outbox.Member{Owner: "me", Partitions: []int{0, 2}}, time.Minute)},
		{"Heartbeat", func() error {
			_, err := b.Heartbeat(ctx, outbox.Member{Owner: "me", MaxPartitions: -1}, time.Minute)
			return err
		},
			outbox.CheckMember(2, outbox.Member{Owner: "me", MaxPartitions: -1}, time.Minute)},
		{"Heartbeat", func() error { _, err := b.Heartbeat(ctx, outbox.Member{Owner: "me"}, 0); return err }, outbox.CheckMember(2, outbox.Member{Owner: "me"}, 0)},
	} {
		require.Error(t, tc.want, tc.op)
		err := tc.call()
		require.ErrorIs(t, err, outbox.ErrInvalidArgument, tc.op)
		assert.Equal(t, "redisoutbox: "+tc.op+": "+tc.want.Error(), err.Error())
		assert.True(t, strings.HasPrefix(err.Error(), "redisoutbox: "+tc.op+": "), err.Error())
	}
	require.NoError(t, b.Close())
	_, err := b.Heartbeat(ctx, outbox.Member{Owner: "me"}, time.Minute)
	assert.ErrorIs(t, err, outbox.ErrClosed)
	assert.ErrorIs(t, b.Leave(ctx, "me"), outbox.ErrClosed)
}
