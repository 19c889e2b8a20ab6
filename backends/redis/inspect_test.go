package redisoutbox

import (
	"encoding/binary"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/outboxrelay/outbox"
)

func TestInspection(t *testing.T) {
	t.Parallel()
	for _, tg := range targets {
		t.Run(tg.name, func(t *testing.T) {
			t.Parallel()
			c := tg.client(t)
			t.Run("PartitionStats", func(t *testing.T) { t.Parallel(); testPartitionStats(t, c) })
			t.Run("PartitionStatsOfEmptyOutbox", func(t *testing.T) { t.Parallel(); testPartitionStatsEmpty(t, c) })
			t.Run("LeaseKeysSetByHand", func(t *testing.T) { t.Parallel(); testLeaseKeysByHand(t, c) })
			t.Run("Lookup", func(t *testing.T) { t.Parallel(); testLookup(t, c) })
			t.Run("LookupOfHeldBackEntryReportsItsOwnDueTime", func(t *testing.T) { t.Parallel(); testLookupHeldBack(t, c) })
			t.Run("LookupOfFormat1Entry", func(t *testing.T) { t.Parallel(); testLookupFormat1(t, c) })
			t.Run("LookupOfCorruptEntry", func(t *testing.T) { t.Parallel(); testLookupCorrupt(t, c) })
			t.Run("LookupOfIDInTwoPartitions", func(t *testing.T) { t.Parallel(); testLookupTwoPartitions(t, c) })
			t.Run("AfterClose", func(t *testing.T) { t.Parallel(); testInspectAfterClose(t, c) })
		})
	}
}

// keysFor returns n distinct keys whose entries go to partition p of
// partitions.
func keysFor(t *testing.T, p, partitions, n int) []string {
	t.Helper()
	var out []string
	for i := 0; len(out) < n; i++ {
		if i == 100000 {
			t.Fatalf("fewer than %d keys map to partition %d of %d", n, p, partitions)
		}
		if k := "key" + strconv.Itoa(i); outbox.PartitionOf(k, partitions) == p {
			out = append(out, k)
		}
	}
	return out
}

func testPartitionStats(t *testing.T, c redis.UniversalClient) {
	ctx := testCtx(t)
	const n = 4
	b := newBackend(t, c, Options{Partitions: n})
	k0, k2 := keysFor(t, 0, n, 3), keyFor(t, 2, n)
	// Partition 0: two due entries read by a live lease and not finished,
	// one scheduled, one parked. Partition 1: a released lease. Partition
	// 2: one due entry and a lease that expired. Partition 3: nothing.
	require.NoError(t, b.Append(ctx,
		outbox.Entry{ID: "due-1", Topic: "t", Key: k0[0]},
		outbox.Entry{ID: "due-2", Topic: "t", Key: k0[1]},
		outbox.Entry{ID: "later", Topic: "t", Key: k0[0], NotBefore: time.Now().Add(time.Hour)},
		outbox.Entry{ID: "two", Topic: "t", Key: k2}))
	l0, err := b.AcquireLease(ctx, 0, "relay-a", time.Minute)
	require.NoError(t, err)
	claimed, err := b.FindPendingBatch(ctx, l0, 10)
	require.NoError(t, err)
	require.Equal(t, []string{"due-1", "due-2"}, ids(claimed))
	require.NoError(t, b.Append(ctx, outbox.Entry{ID: "dead", Topic: "t", Key: k0[2]}))
	require.NoError(t, b.MarkFailed(ctx, l0, []outbox.Failure{{ID: "dead", Error: "boom", Park: true}}))
	l1, err := b.AcquireLease(ctx, 1, "relay-b", time.Minute)
	require.NoError(t, err)
	require.NoError(t, b.ReleaseLease(ctx, l1))
	_, err = b.AcquireLease(ctx, 2, "relay-c", time.Minute)
	require.NoError(t, err)
	// Expire partition 2's lease on the server's clock, without waiting:
	// an expiry time in the past makes Redis drop the key at once.
	require.NoError(t, c.PExpireAt(ctx, b.parts[2].lease, time.Now().Add(-time.Hour)).Err())

	before := serverMillis(t, ctx, c)
	got, err := b.PartitionStats(ctx)
	require.NoError(t, err)
	total, err := b.Stats(ctx)
	require.NoError(t, err)
	require.Len(t, got, n)

	want := []outbox.Stats{{Pending: 3, Due: 2, Parked: 1}, {}, {Pending: 1, Due: 1}, {}}
	var sum outbox.Stats
	for i, s := range got {
		assert.Equal(t, i, s.Partition)
		assert.Equal(t, want[i].Pending, s.Pending, "partition %d pending (claimed entries count)", i)
		assert.Equal(t, want[i].Due, s.Due, "partition %d due", i)
		assert.Equal(t, want[i].Parked, s.Parked, "partition %d parked", i)
		assert.Equal(t, s.Due > 0, !s.OldestDue.IsZero(), "partition %d: OldestDue %v with %d due", i, s.OldestDue, s.Due)
		assert.False(t, s.OldestDue.After(time.UnixMilli(before)), "partition %d: OldestDue %v is after the read (%d ms)", i, s.OldestDue, before)
		sum.Pending += s.Pending
		sum.Due += s.Due
		sum.Parked += s.Parked
		if !s.OldestDue.IsZero() && (sum.OldestDue.IsZero() || s.OldestDue.Before(sum.OldestDue)) {
			sum.OldestDue = s.OldestDue
		}
	}
	assert.Equal(t, total, sum, "the partitions add up to Stats")

	got0 := got[0].Lease
	assert.Equal(t, outbox.Lease{Partition: 0, Owner: "relay-a", Version: l0.Version}, outbox.Lease{Partition: got0.Partition, Owner: got0.Owner, Version: got0.Version})
	// Both expiries are the lease key's, read by the server's TIME in whole
	// ms: they differ by rounding only.
	assert.WithinDuration(t, l0.Expires, got0.Expires, 50*time.Millisecond)
	for _, i := range []int{1, 2, 3} {
		assert.Equal(t, outbox.Lease{}, got[i].Lease, "partition %d: released, expired, never taken", i)
	}
}

func testPartitionStatsEmpty(t *testing.T, c redis.UniversalClient) {
	ctx := testCtx(t)
	b := newBackend(t, c, Options{Partitions: 3})
	got, err := b.PartitionStats(ctx)
	require.NoError(t, err)
	assert.Equal(t, []outbox.PartitionStats{{Partition: 0}, {Partition: 1}, {Partition: 2}}, got)
}

func testLeaseKeysByHand(t *testing.T, c redis.UniversalClient) {
	ctx := testCtx(t)
	b := newBackend(t, c, Options{Partitions: 2})
	// A lease key without an expiry is live for ever: reported, with no
	// expiry time.
	require.NoError(t, c.Set(ctx, b.parts[0].lease, "7:by-hand", 0).Err())
	got, err := b.PartitionStats(ctx)
	require.NoError(t, err)
	assert.Equal(t, outbox.Lease{Partition: 0, Owner: "by-hand", Version: 7}, got[0].Lease)

	// A value that is not "version:owner" is named in the error; Stats,
	// which reads no lease, is not affected.
	require.NoError(t, c.Set(ctx, b.parts[1].lease, "garbage", time.Minute).Err())
	_, err = b.PartitionStats(ctx)
	require.Error(t, err)
	assert.Contains(t, err.Error(), b.parts[1].lease)
	assert.Contains(t, err.Error(), `"garbage"`)
	_, err = b.Stats(ctx)
	assert.NoError(t, err)
}

func testLookup(t *testing.T, c redis.UniversalClient) {
	ctx := testCtx(t)
	const n = 2
	b := newBackend(t, c, Options{Partitions: n})
	k := keyFor(t, 1, n)
	at := time.Now().Add(time.Hour).Truncate(time.Millisecond).Add(300 * time.Microsecond)
	longErr := strings.Repeat("é", 1500) // 3000 bytes: kept in full
	require.NoError(t, b.Append(ctx,
		outbox.Entry{ID: "fails", Topic: "t", Key: k, Payload: []byte("p\x00"), Headers: map[string]string{"a": "1", "b": "\x00"}},
		outbox.Entry{ID: "parks", Topic: "t", Key: k + "-other"},
		outbox.Entry{ID: "scheduled", Topic: "t", Key: k, NotBefore: at},
		outbox.Entry{ID: "plain", Topic: "t"},
	))

	info, err := b.Lookup(ctx, "scheduled")
	require.NoError(t, err)
	assert.False(t, info.Parked)
	assert.Equal(t, 1, info.Partition)
	assert.Equal(t, k, info.Key)
	assert.True(t, info.NotBefore.Equal(at), "NotBefore %v, want %v", info.NotBefore, at)
	assert.True(t, info.DueAt.Equal(at.Truncate(time.Millisecond).Add(time.Millisecond)), "a scheduled entry is due at its NotBefore rounded up to the ms: %v, NotBefore %v", info.DueAt, at)

	info, err = b.Lookup(ctx, "plain")
	require.NoError(t, err)
	assert.True(t, info.DueAt.Equal(time.UnixMilli(info.CreatedAt.UnixMilli())), "an entry appended for now is due at its append time: due %v, created %v", info.DueAt, info.CreatedAt)

	l, err := b.AcquireLease(ctx, 1, "relay", time.Minute)
	require.NoError(t, err)
	_, err = b.FindPendingBatch(ctx, l, 10)
	require.NoError(t, err)
	before := serverMillis(t, ctx, c)
	require.NoError(t, b.MarkFailed(ctx, l, []outbox.Failure{{ID: "fails", Error: "timeout", Delay: time.Hour}}))
	after := serverMillis(t, ctx, c) + 1 // TIME rounded up

	info, err = b.Lookup(ctx, "fails")
	require.NoError(t, err)
	assert.False(t, info.Parked)
	assert.Equal(t, 1, info.Attempts)
	assert.Equal(t, "timeout", info.LastError)
	assert.Equal(t, 1, info.Partition)
	assert.Equal(t, "fails", info.ID)
	assert.Equal(t, "t", info.Topic)
	assert.Equal(t, []byte("p\x00"), info.Payload)
	assert.Equal(t, map[string]string{"a": "1", "b": "\x00"}, info.Headers)
	assert.False(t, info.CreatedAt.IsZero())
	due := info.DueAt.UnixMilli()
	assert.True(t, due >= before+3_600_000 && due <= after+3_600_000,
		"a retrying entry is due at its retry time, an hour after MarkFailed ran: %d ms, want %d..%d", due, before+3_600_000, after+3_600_000)

	pp := outbox.PartitionOf(k+"-other", n)
	lp, err := b.AcquireLease(ctx, pp, "relay", time.Minute)
	require.NoError(t, err)
	require.NoError(t, b.MarkFailed(ctx, lp, []outbox.Failure{{ID: "parks", Error: longErr, Park: true}}))
	info, err = b.Lookup(ctx, "parks")
	require.NoError(t, err)
	assert.True(t, info.Parked)
	assert.True(t, info.DueAt.IsZero(), "a parked entry has no due time: %v", info.DueAt)
	assert.Equal(t, 1, info.Attempts)
	assert.Equal(t, longErr, info.LastError)
	assert.Equal(t, pp, info.Partition)

	lplain, err := b.AcquireLease(ctx, outbox.PartitionOf("", n), "relay", time.Minute)
	require.NoError(t, err)
	require.NoError(t, b.MarkSent(ctx, lplain, []string{"plain"}))
	require.NoError(t, b.Cancel(ctx, "scheduled"))
	for _, id := range []string{"plain", "scheduled", "never", "", "nul\x00"} {
		_, err := b.Lookup(ctx, id)
		assert.ErrorIs(t, err, outbox.ErrNotFound, "Lookup(%q): sent, cancelled or never appended", id)
	}
}

// A held-back entry the claim re-scored to its blocker's retry time still
// reports its own due time.
func testLookupHeldBack(t *testing.T, c redis.UniversalClient) {
	ctx := testCtx(t)
	b := newBackend(t, c, Options{})
	require.NoError(t, b.Append(ctx,
		outbox.Entry{ID: "blocker", Topic: "t", Key: "k"},
		outbox.Entry{ID: "held", Topic: "t", Key: "k"}))
	l, err := b.AcquireLease(ctx, 0, "relay", time.Minute)
	require.NoError(t, err)
	_, err = b.FindPendingBatch(ctx, l, 1)
	require.NoError(t, err)
	require.NoError(t, b.MarkFailed(ctx, l, []outbox.Failure{{ID: "blocker", Error: "x", Delay: time.Hour}}))
	batch, err := b.FindPendingBatch(ctx, l, 10)
	require.NoError(t, err)
	require.Empty(t, batch)

	blocker, err := b.Lookup(ctx, "blocker")
	require.NoError(t, err)
	info, err := b.Lookup(ctx, "held")
	require.NoError(t, err)
	v, err := c.HGet(ctx, b.parts[0].entries, "held").Result()
	require.NoError(t, err)
	score, err := c.ZScore(ctx, b.parts[0].pending, v[1:9]+"held").Result()
	require.NoError(t, err)
	require.Equal(t, float64(blocker.DueAt.UnixMilli()), score, "the claim moved the held-back entry to its blocker's retry time")
	assert.Equal(t, 0, info.Attempts)
	assert.True(t, info.DueAt.Equal(time.UnixMilli(info.CreatedAt.UnixMilli())), "due %v, want its append time %v", info.DueAt, info.CreatedAt)
}

func testLookupFormat1(t *testing.T, c redis.UniversalClient) {
	ctx := testCtx(t)
	b := newBackend(t, c, Options{})
	created := time.Now().Add(-time.Minute)
	e := outbox.Entry{ID: "old", Topic: "t", Key: "a", Payload: []byte("one")}
	v := encodeV1(&e, 1, created)
	require.NoError(t, c.HSet(ctx, b.parts[0].entries, "old", v).Err())
	var s8 [8]byte
	binary.BigEndian.PutUint64(s8[:], 1)
	due := created.Add(time.Hour).UnixMilli()
	require.NoError(t, c.ZAdd(ctx, b.parts[0].pending, redis.Z{Score: float64(due), Member: string(s8[:]) + "old"}).Err())
	info, err := b.Lookup(ctx, "old")
	require.NoError(t, err)
	assert.Equal(t, "a", info.Key)
	assert.Equal(t, []byte("one"), info.Payload)
	assert.Equal(t, due, info.DueAt.UnixMilli(), "a format 1 entry has no position: its score is its due time")
}

func testLookupCorrupt(t *testing.T, c redis.UniversalClient) {
	ctx := testCtx(t)
	b := newBackend(t, c, Options{})
	require.NoError(t, b.Append(ctx,
		outbox.Entry{ID: "bad", Topic: "t", Headers: map[string]string{"h": "v"}},
		outbox.Entry{ID: "lost", Topic: "t"}))
	v, err := c.HGet(ctx, b.parts[0].entries, "bad").Result()
	require.NoError(t, err)
	require.NoError(t, c.HSet(ctx, b.parts[0].entries, "bad", v[:len(v)-3]).Err()) // cut into the header value
	_, err = b.Lookup(ctx, "bad")
	require.Error(t, err)
	assert.NotErrorIs(t, err, outbox.ErrNotFound)
	assert.Contains(t, err.Error(), `"bad"`)
	assert.Contains(t, err.Error(), "corrupt stored entry")

	// An entry in the hash but in neither set.
	lv, err := c.HGet(ctx, b.parts[0].entries, "lost").Result()
	require.NoError(t, err)
	require.NoError(t, c.ZRem(ctx, b.parts[0].pending, lv[1:9]+"lost").Err())
	_, err = b.Lookup(ctx, "lost")
	require.Error(t, err)
	assert.NotErrorIs(t, err, outbox.ErrNotFound)
	assert.Contains(t, err.Error(), `"lost"`)
	assert.Contains(t, err.Error(), "neither pending nor parked")
}

// Idempotency is per partition, so one ID appended under keys of two
// partitions is stored twice; Lookup reports the lower partition.
func testLookupTwoPartitions(t *testing.T, c redis.UniversalClient) {
	ctx := testCtx(t)
	b := newBackend(t, c, Options{Partitions: 4})
	require.NoError(t, b.Append(ctx, outbox.Entry{ID: "twice", Topic: "t", Key: keyFor(t, 3, 4)}))
	require.NoError(t, b.Append(ctx, outbox.Entry{ID: "twice", Topic: "t", Key: keyFor(t, 1, 4)}))
	info, err := b.Lookup(ctx, "twice")
	require.NoError(t, err)
	assert.Equal(t, 1, info.Partition)
}

func testInspectAfterClose(t *testing.T, c redis.UniversalClient) {
	ctx := testCtx(t)
	b := newBackend(t, c, Options{})
	require.NoError(t, b.Append(ctx, outbox.Entry{ID: "x", Topic: "t"}))
	require.NoError(t, b.Close())
	_, err := b.PartitionStats(ctx)
	assert.ErrorIs(t, err, outbox.ErrClosed)
	_, err = b.Lookup(ctx, "x")
	assert.ErrorIs(t, err, outbox.ErrClosed)
}
