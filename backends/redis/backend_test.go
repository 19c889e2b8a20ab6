package redisoutbox

import (
	"context"
	"encoding/binary"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/outboxrelay/outbox"
)

func TestPrefixValidation(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		prefix, want string
	}{
		{"outbox", "no hash tag"},
		{"{a}{b}", "exactly one"},
		{"{a}:{b}", "exactly one"},
		{"{}", "empty hash tag"},
		{"x:{}", "empty hash tag"},
		{"{outbox", "exactly one"},
		{"outbox}", "exactly one"},
		{"}a{", "before"},
		{"{{a}}", "exactly one"},
	} {
		t.Run(tc.prefix, func(t *testing.T) {
			_, err := New(context.Background(), redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}), Options{Prefix: tc.prefix})
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
			assert.True(t, strings.HasPrefix(err.Error(), "redisoutbox: "), err.Error())
			assert.Contains(t, err.Error(), `for example "{outbox}"`, "the error says how to fix it")
		})
	}
	for _, ok := range []string{"{outbox}", "app:{orders}", "a:{b}:c"} {
		assert.NoError(t, validatePrefix(ok), ok)
	}
	k := partitionKeys("app:{orders}:x", 3)
	assert.Equal(t, "app:{orders:3}:x:pending", k.pending)
	assert.Equal(t, "{orders:3}", k.tag)
}

func TestBackend(t *testing.T) {
	t.Parallel()
	for _, tg := range targets {
		t.Run(tg.name, func(t *testing.T) {
			t.Parallel()
			c := tg.client(t)
			t.Run("AppendClaimSend", func(t *testing.T) { t.Parallel(); testAppendClaimSend(t, c) })
			t.Run("SameMillisecondKeepsAppendOrder", func(t *testing.T) { t.Parallel(); testSameMillisecondOrder(t, c) })
			t.Run("StaleHolderIsFenced", func(t *testing.T) { t.Parallel(); testStaleHolder(t, c) })
			t.Run("CorruptEntryIsParked", func(t *testing.T) { t.Parallel(); testCorrupt(t, c) })
			t.Run("HoldBackDoesNotStarveOtherKeys", func(t *testing.T) { t.Parallel(); testHoldBackCrowd(t, c) })
			t.Run("Format1EntriesAreConverted", func(t *testing.T) { t.Parallel(); testFormat1(t, c) })
			t.Run("UnfinishedClaimsAreReadAgainInOrder", func(t *testing.T) { t.Parallel(); testUnfinishedClaims(t, c) })
			t.Run("LegacyInflightComesBack", func(t *testing.T) { t.Parallel(); testLegacyInflight(t, c) })
			t.Run("RetryBeforePositionKeepsKeyOrder", func(t *testing.T) { t.Parallel(); testRetryBeforePosition(t, c) })
			t.Run("RescoreBehindDueRetryReturnsEachEntryOnce", func(t *testing.T) { t.Parallel(); testRescoreInScan(t, c) })
			t.Run("RetryDelayByServerClock", func(t *testing.T) { t.Parallel(); testRetryDelayByServerClock(t, c) })
			t.Run("InspectAcrossPartitions", func(t *testing.T) { t.Parallel(); testInspect(t, c) })
			t.Run("Notifications", func(t *testing.T) { t.Parallel(); testNotifications(t, c) })
			t.Run("RollbackLeavesNothing", func(t *testing.T) { t.Parallel(); testRollback(t, c) })
		})
	}
}

func ids(es []outbox.Entry) []string {
	out := make([]string, len(es))
	for i, e := range es {
		out[i] = e.ID
	}
	return out
}

func testAppendClaimSend(t *testing.T, c redis.UniversalClient) {
	ctx := testCtx(t)
	b := newBackend(t, c, Options{})
	nb := time.Now().Add(-time.Hour).Truncate(time.Millisecond)
	in := outbox.Entry{ID: "e1", Topic: "t", Key: "k", Payload: []byte("p\x00q"), Headers: map[string]string{"h": "v", "a": ""}, NotBefore: nb}
	require.NoError(t, b.Append(ctx, in, in)) // the duplicate ID is a no-op
	require.NoError(t, b.Append(ctx, outbox.Entry{ID: "e2", Topic: "t"}))
	l, err := b.AcquireLease(ctx, 0, "me", time.Minute)
	require.NoError(t, err)
	got, err := b.FindPendingBatch(ctx, l, 10)
	require.NoError(t, err)
	require.Equal(t, []string{"e1", "e2"}, ids(got))
	e := got[0]
	assert.Equal(t, "t", e.Topic)
	assert.Equal(t, "k", e.Key)
	assert.Equal(t, []byte("p\x00q"), e.Payload)
	assert.Equal(t, map[string]string{"h": "v", "a": ""}, e.Headers)
	assert.True(t, e.NotBefore.Equal(nb), "%v != %v", e.NotBefore, nb)
	assert.WithinDuration(t, time.Now(), e.CreatedAt, time.Minute)
	again, err := b.FindPendingBatch(ctx, l, 10)
	require.NoError(t, err)
	assert.Equal(t, []string{"e1", "e2"}, ids(again), "the lease is the claim: unfinished entries are read again, in order")
	require.NoError(t, b.MarkSent(ctx, l, []string{"e1", "e2", "unknown"}))
	require.NoError(t, b.MarkSent(ctx, l, []string{"e1"}), "MarkSent is idempotent")
	st, err := b.Stats(ctx)
	require.NoError(t, err)
	assert.Equal(t, outbox.Stats{}, st)
}

func testSameMillisecondOrder(t *testing.T, c redis.UniversalClient) {
	ctx := testCtx(t)
	b := newBackend(t, c, Options{})
	const n = 257
	var want []string
	pipe := c.TxPipeline()
	for i := range n {
		id := fmt.Sprintf("z%03d", n-i) // IDs sort opposite to append order
		want = append(want, id)
		require.NoError(t, b.AppendInTx(ctx, pipe, outbox.Entry{ID: id, Topic: "t", Key: "same"}))
	}
	_, err := pipe.Exec(ctx)
	require.NoError(t, err)
	l, err := b.AcquireLease(ctx, 0, "me", time.Minute)
	require.NoError(t, err)
	var got []string
	for len(got) < n {
		batch, err := b.FindPendingBatch(ctx, l, 7)
		require.NoError(t, err)
		require.NotEmpty(t, batch)
		got = append(got, ids(batch)...)
		require.NoError(t, b.MarkSent(ctx, l, ids(batch)))
	}
	assert.Equal(t, want, got)
}

func testStaleHolder(t *testing.T, c redis.UniversalClient) {
	ctx := testCtx(t)
	b := newBackend(t, c, Options{})
	for i := range 4 {
		require.NoError(t, b.Append(ctx, outbox.Entry{ID: "s" + strconv.Itoa(i), Topic: "t", Key: "k"}))
	}
	old, err := b.AcquireLease(ctx, 0, "old", time.Minute)
	require.NoError(t, err)
	_, err = b.AcquireLease(ctx, 0, "new", time.Minute)
	require.ErrorIs(t, err, outbox.ErrLeaseHeld)
	batch, err := b.FindPendingBatch(ctx, old, 2)
	require.NoError(t, err)
	require.Equal(t, []string{"s0", "s1"}, ids(batch))
	require.NoError(t, b.MarkSent(ctx, old, []string{"s0"}))

	// The lease expires mid-batch (deleting the key is what expiry does)
	// and another relay takes over.
	require.NoError(t, c.Del(ctx, b.parts[0].lease).Err())
	cur, err := b.AcquireLease(ctx, 0, "new", time.Minute)
	require.NoError(t, err)
	require.Greater(t, cur.Version, old.Version)

	for name, call := range map[string]func() error{
		"MarkSent":   func() error { return b.MarkSent(ctx, old, []string{"s1"}) },
		"MarkFailed": func() error { return b.MarkFailed(ctx, old, []outbox.Failure{{ID: "s1", Park: true}}) },
		"Release":    func() error { return b.Release(ctx, old, []string{"s1"}) },
		"Claim":      func() error { _, err := b.FindPendingBatch(ctx, old, 5); return err },
		"Renew":      func() error { _, err := b.RenewLease(ctx, old, time.Minute); return err },
	} {
		assert.ErrorIs(t, call(), outbox.ErrLeaseLost, name)
	}
	require.NoError(t, b.ReleaseLease(ctx, old), "releasing a lost lease is a no-op")
	// The new holder gets the stale holder's unfinished claim back, first.
	batch, err = b.FindPendingBatch(ctx, cur, 10)
	require.NoError(t, err)
	assert.Equal(t, []string{"s1", "s2", "s3"}, ids(batch))
	assert.Equal(t, 0, batch[0].Attempts)

	// Released claims come back in order to the next holder.
	require.NoError(t, b.ReleaseLease(ctx, cur))
	next, err := b.AcquireLease(ctx, 0, "third", time.Minute)
	require.NoError(t, err)
	require.Greater(t, next.Version, cur.Version)
	batch, err = b.FindPendingBatch(ctx, next, 10)
	require.NoError(t, err)
	assert.Equal(t, []string{"s1", "s2", "s3"}, ids(batch))
}

func testCorrupt(t *testing.T, c redis.UniversalClient) {
	ctx := testCtx(t)
	b := newBackend(t, c, Options{})
	require.NoError(t, b.Append(ctx,
		outbox.Entry{ID: "bad1", Topic: "t", Key: "k"},
		outbox.Entry{ID: "bad2", Topic: "t"},
		outbox.Entry{ID: "good", Topic: "t", Key: "k2"},
		outbox.Entry{ID: "next-k", Topic: "t", Key: "k"}))
	// bad1: truncated after a valid header; bad2: an unknown version.
	v, err := c.HGet(ctx, b.parts[0].entries, "bad1").Result()
	require.NoError(t, err)
	require.NoError(t, c.HSet(ctx, b.parts[0].entries, "bad1", v[:30]).Err())
	v2, err := c.HGet(ctx, b.parts[0].entries, "bad2").Result()
	require.NoError(t, err)
	require.NoError(t, c.HSet(ctx, b.parts[0].entries, "bad2", "\x07"+v2[1:]).Err())

	l, err := b.AcquireLease(ctx, 0, "me", time.Minute)
	require.NoError(t, err)
	batch, err := b.FindPendingBatch(ctx, l, 10)
	require.NoError(t, err)
	assert.Equal(t, []string{"good", "next-k"}, ids(batch), "corrupt entries never stall the relay, nor hold back their key")
	assertKeyOrder(t, c, b)
	parked, err := b.Parked(ctx, "", 10)
	require.NoError(t, err)
	require.Equal(t, []string{"bad1", "bad2"}, ids(parked))
	assert.Contains(t, parked[0].LastError, "corrupt stored entry")
	assert.Contains(t, parked[1].LastError, "unknown format version 7")
	assert.Equal(t, v[:30], string(parked[0].Payload), "the raw value is kept for inspection")
	st, err := b.Stats(ctx)
	require.NoError(t, err)
	assert.Equal(t, int64(2), st.Parked)
}

func testHoldBackCrowd(t *testing.T, c redis.UniversalClient) {
	ctx := testCtx(t)
	b := newBackend(t, c, Options{})
	pipe := c.TxPipeline()
	require.NoError(t, b.AppendInTx(ctx, pipe, outbox.Entry{ID: "a000", Topic: "t", Key: "a"}))
	for i := 1; i <= 300; i++ {
		require.NoError(t, b.AppendInTx(ctx, pipe, outbox.Entry{ID: fmt.Sprintf("a%03d", i), Topic: "t", Key: "a"}))
	}
	require.NoError(t, b.AppendInTx(ctx, pipe, outbox.Entry{ID: "b", Topic: "t", Key: "b"}, outbox.Entry{ID: "u", Topic: "t"}))
	_, err := pipe.Exec(ctx)
	require.NoError(t, err)
	l, err := b.AcquireLease(ctx, 0, "me", time.Minute)
	require.NoError(t, err)
	batch, err := b.FindPendingBatch(ctx, l, 1)
	require.NoError(t, err)
	require.Equal(t, []string{"a000"}, ids(batch))
	require.NoError(t, b.MarkFailed(ctx, l, []outbox.Failure{{ID: "a000", Error: "boom", Delay: time.Hour}}))

	// 300 held-back entries of key a sit ahead of b and u; a small batch
	// still reaches them (the scan re-scores the crowd behind a000).
	var got []string
	for range 5 {
		batch, err = b.FindPendingBatch(ctx, l, 2)
		require.NoError(t, err)
		got = append(got, ids(batch)...)
		if len(got) == 2 {
			break
		}
	}
	assert.Equal(t, []string{"b", "u"}, got)
	require.NoError(t, b.MarkSent(ctx, l, got))

	// Once a000 is gone (cancelled here, long before its retry time), its
	// key flows again at once, in append order.
	require.NoError(t, b.Cancel(ctx, "a000"))
	var rest []string
	for len(rest) < 300 {
		batch, err = b.FindPendingBatch(ctx, l, 100)
		require.NoError(t, err)
		require.NotEmpty(t, batch, "after %d", len(rest))
		rest = append(rest, ids(batch)...)
		require.NoError(t, b.MarkSent(ctx, l, ids(batch)))
	}
	for i, id := range rest {
		require.Equal(t, fmt.Sprintf("a%03d", i+1), id)
	}
	assertKeyOrder(t, c, b)
}

// assertKeyOrder checks partition 0's key-order set: it holds exactly the
// given IDs (the marked entries: attempted, or re-scored by a claim), and
// each of them is pending.
func assertKeyOrder(t *testing.T, c redis.UniversalClient, b *Backend, want ...string) {
	t.Helper()
	ctx := testCtx(t)
	k := b.parts[0]
	members, err := c.ZRange(ctx, k.keyorder, 0, -1).Result()
	require.NoError(t, err)
	var got []string
	for _, m := range members {
		kl := int(binary.BigEndian.Uint32([]byte(m[:4])))
		pm := m[4+kl+8:] // the pending member: seq8 | ID
		assert.NoError(t, c.ZScore(ctx, k.pending, pm).Err(), "key-order member of %q is not pending", pm[8:])
		got = append(got, pm[8:])
	}
	assert.ElementsMatch(t, want, got, "key-order members")
}

// encodeV1 encodes e in format 1, as earlier builds stored it.
func encodeV1(e *outbox.Entry, seq uint64, created time.Time) []byte {
	v2 := encodeEntry(e)
	b := []byte{encodingV1}
	b = binary.BigEndian.AppendUint64(b, seq)
	b = binary.BigEndian.AppendUint64(b, uint64(created.UnixMicro()))
	b = binary.BigEndian.AppendUint32(b, 0) // attempts
	b = binary.BigEndian.AppendUint32(b, 0) // error length
	return append(b, v2[fixedHeaderLen:]...)
}

// testFormat1 stores entries the way earlier builds did (format 1, no
// key-order member) and checks that the scripts convert them and keep
// per-key order with entries appended in format 2.
func testFormat1(t *testing.T, c redis.UniversalClient) {
	ctx := testCtx(t)
	b := newBackend(t, c, Options{})
	k := b.parts[0]
	created := time.Now().Add(-time.Minute)
	old := []outbox.Entry{
		{ID: "a1", Topic: "t", Key: "a", Payload: []byte("one"), Headers: map[string]string{"h": "1"}},
		{ID: "a2", Topic: "t", Key: "a", Payload: []byte("two")},
		{ID: "u1", Topic: "t"},
		{ID: "p1", Topic: "t", Key: "a", Payload: []byte("parked")},
	}
	for i := range old {
		seq := uint64(i + 1)
		v := encodeV1(&old[i], seq, created)
		require.NoError(t, c.HSet(ctx, k.entries, old[i].ID, v).Err())
		var s8 [8]byte
		binary.BigEndian.PutUint64(s8[:], seq)
		if old[i].ID == "p1" {
			require.NoError(t, c.ZAdd(ctx, k.parked, redis.Z{Score: 0, Member: "p1"}).Err())
		} else {
			require.NoError(t, c.ZAdd(ctx, k.pending, redis.Z{Score: float64(created.UnixMilli()), Member: string(s8[:]) + old[i].ID}).Err())
		}
	}
	require.NoError(t, c.Set(ctx, k.seq, len(old), 0).Err())
	require.NoError(t, b.Append(ctx, outbox.Entry{ID: "a3", Topic: "t", Key: "a"}))

	l, err := b.AcquireLease(ctx, 0, "me", time.Minute)
	require.NoError(t, err)
	batch, err := b.FindPendingBatch(ctx, l, 1)
	require.NoError(t, err)
	require.Equal(t, []string{"a1"}, ids(batch))
	assert.Equal(t, []byte("one"), batch[0].Payload)
	assert.Equal(t, map[string]string{"h": "1"}, batch[0].Headers)
	assert.WithinDuration(t, created, batch[0].CreatedAt, time.Millisecond)
	require.NoError(t, b.MarkFailed(ctx, l, []outbox.Failure{{ID: "a1", Error: "boom", Delay: time.Hour}}))
	batch, err = b.FindPendingBatch(ctx, l, 10)
	require.NoError(t, err)
	require.Equal(t, []string{"u1"}, ids(batch), "the converted, failing a1 holds back a2 (format 1) and a3 (format 2)")
	require.NoError(t, b.MarkSent(ctx, l, ids(batch)))

	// Cancelling a1 frees its key at once, in order.
	require.NoError(t, b.Cancel(ctx, "a1"))
	batch, err = b.FindPendingBatch(ctx, l, 10)
	require.NoError(t, err)
	require.Equal(t, []string{"a2", "a3"}, ids(batch))
	require.NoError(t, b.MarkSent(ctx, l, ids(batch)))

	n, err := b.Requeue(ctx, "p1")
	require.NoError(t, err)
	require.Equal(t, 1, n)
	raw, err := c.HGet(ctx, k.entries, "p1").Result()
	require.NoError(t, err)
	assert.Equal(t, byte(encodingV2), raw[0], "a requeued entry is written in format 2")
	batch, err = b.FindPendingBatch(ctx, l, 10)
	require.NoError(t, err)
	require.Equal(t, []string{"p1"}, ids(batch))
	assert.Equal(t, []byte("parked"), batch[0].Payload)
	assertKeyOrder(t, c, b) // requeued: due at its position, not marked
	require.NoError(t, b.MarkSent(ctx, l, ids(batch)))
	assertKeyOrder(t, c, b)
}

func testInspect(t *testing.T, c redis.UniversalClient) {
	ctx := testCtx(t)
	b := newBackend(t, c, Options{Partitions: 4})
	var all []string
	for i := range 12 {
		id := fmt.Sprintf("i%02d", i)
		all = append(all, id)
		require.NoError(t, b.Append(ctx, outbox.Entry{ID: id, Topic: "t", Key: "key" + strconv.Itoa(i)}))
	}
	require.NoError(t, b.Append(ctx, outbox.Entry{ID: "later", Topic: "t", NotBefore: time.Now().Add(time.Hour)}))
	st, err := b.Stats(ctx)
	require.NoError(t, err)
	assert.Equal(t, int64(13), st.Pending)
	assert.Equal(t, int64(12), st.Due)
	assert.False(t, st.OldestDue.IsZero())
	// Park everything that is due, in every partition.
	for p := range 4 {
		l, err := b.AcquireLease(ctx, p, "me", time.Minute)
		require.NoError(t, err)
		batch, err := b.FindPendingBatch(ctx, l, 100)
		require.NoError(t, err)
		var fs []outbox.Failure
		for _, e := range batch {
			require.Equal(t, p, e.Partition)
			fs = append(fs, outbox.Failure{ID: e.ID, Park: true, Error: "poison"})
		}
		require.NoError(t, b.MarkFailed(ctx, l, fs))
	}
	var paged []string
	after := ""
	for {
		page, err := b.Parked(ctx, after, 5)
		require.NoError(t, err)
		if len(page) == 0 {
			break
		}
		require.LessOrEqual(t, len(page), 5)
		paged = append(paged, ids(page)...)
		after = page[len(page)-1].ID
	}
	assert.Equal(t, all, paged)
	n, err := b.Requeue(ctx, "i00", "i01", "nope")
	require.NoError(t, err)
	assert.Equal(t, 2, n)
	require.NoError(t, b.Cancel(ctx, "i02"))
	require.NoError(t, b.Cancel(ctx, "later"))
	require.ErrorIs(t, b.Cancel(ctx, "later"), outbox.ErrNotFound)
	st, err = b.Stats(ctx)
	require.NoError(t, err)
	assert.Equal(t, outbox.Stats{Pending: 2, Due: 2, Parked: 9, OldestDue: st.OldestDue}, st)
}

// keyFor returns a key whose entries go to partition p of n.
func keyFor(t *testing.T, p, n int) string {
	t.Helper()
	for i := range 100000 {
		if k := "key" + strconv.Itoa(i); outbox.PartitionOf(k, n) == p {
			return k
		}
	}
	t.Fatalf("no key maps to partition %d of %d", p, n)
	return ""
}

// receive returns the next value of ch, failing the test when ctx ends
// first or ch is closed.
func receive(t *testing.T, ctx context.Context, ch <-chan int) int {
	t.Helper()
	select {
	case p, ok := <-ch:
		require.True(t, ok, "the notification channel closed")
		return p
	case <-ctx.Done():
		t.Fatal("no notification")
		return 0
	}
}

// testNotifications: an append to partition 3 of 8 delivers 3 and nothing
// else, from a standalone Append and from the caller's MULTI alike. The
// append to partition 5 that follows is the barrier: on one connection
// (single node) messages arrive in order, so nothing may come between;
// on Cluster each partition has its own subscription, so only 3 and 5
// may arrive, once each.
func testNotifications(t *testing.T, c redis.UniversalClient) {
	ctx := testCtx(t)
	b := newBackend(t, c, Options{Partitions: 8})
	nctx, cancel := context.WithCancel(ctx)
	ch, err := b.Notifications(nctx)
	require.NoError(t, err)
	k3, k5 := keyFor(t, 3, 8), keyFor(t, 5, 8)
	_, cluster := c.(*redis.ClusterClient)
	for _, inTx := range []bool{false, true} {
		for _, key := range []string{k3, k5} {
			e := outbox.Entry{Topic: "t", Key: key}
			if inTx {
				_, err = c.TxPipelined(ctx, func(pipe redis.Pipeliner) error { return b.AppendInTx(ctx, pipe, e) })
			} else {
				err = b.Append(ctx, e)
			}
			require.NoError(t, err)
		}
		got := []int{receive(t, ctx, ch), receive(t, ctx, ch)}
		if cluster {
			assert.ElementsMatch(t, []int{3, 5}, got, "in tx: %v", inTx)
		} else {
			assert.Equal(t, []int{3, 5}, got, "in tx: %v", inTx)
		}
	}
	// An append of nothing new (a duplicate ID) publishes nothing. The
	// barrier is a message on partition 3's own channel (so it arrives
	// after anything the append published) whose payload is no partition
	// number: it arrives as AllPartitions.
	require.NoError(t, b.Append(ctx, outbox.Entry{ID: "dup", Topic: "t", Key: k3}))
	require.Equal(t, 3, receive(t, ctx, ch))
	require.NoError(t, b.Append(ctx, outbox.Entry{ID: "dup", Topic: "t", Key: k3}))
	for _, payload := range []string{"barrier", "8", "-1", ""} {
		require.NoError(t, c.SPublish(ctx, b.parts[3].notify, payload).Err())
		require.Equal(t, outbox.AllPartitions, receive(t, ctx, ch), "payload %q (a duplicate publishes nothing)", payload)
	}
	cancel()
	for range ch {
	}
}

func testRollback(t *testing.T, c redis.UniversalClient) {
	ctx := testCtx(t)
	b := newBackend(t, c, Options{})
	pipe := c.TxPipeline()
	require.NoError(t, b.AppendInTx(ctx, pipe, outbox.Entry{ID: "r", Topic: "t"}))
	pipe.Discard()
	st, err := b.Stats(ctx)
	require.NoError(t, err)
	assert.Equal(t, int64(0), st.Pending)
	require.NoError(t, b.Close())
	assert.ErrorIs(t, b.AppendInTx(ctx, pipe, outbox.Entry{Topic: "t"}), outbox.ErrClosed)
	_, err = b.AcquireLease(ctx, 0, "me", time.Minute)
	assert.ErrorIs(t, err, outbox.ErrClosed)
}

// testUnfinishedClaims: the lease is the claim, so an unfinished entry
// is read again by the next FindPendingBatch of the lease, first and in
// order. One that was attempted (failed, retry due) is read alone: it holds
// back the later entries of its key, within a batch and across calls.
func testUnfinishedClaims(t *testing.T, c redis.UniversalClient) {
	ctx := testCtx(t)
	b := newBackend(t, c, Options{})
	require.NoError(t, b.Append(ctx,
		outbox.Entry{ID: "k1", Topic: "t", Key: "k"},
		outbox.Entry{ID: "k2", Topic: "t", Key: "k"},
		outbox.Entry{ID: "k3", Topic: "t", Key: "k"}))
	l, err := b.AcquireLease(ctx, 0, "me", time.Minute)
	require.NoError(t, err)
	fetch := func(limit int) []string {
		batch, err := b.FindPendingBatch(ctx, l, limit)
		require.NoError(t, err)
		return ids(batch)
	}
	require.Equal(t, []string{"k1"}, fetch(1))
	require.Equal(t, []string{"k1", "k2", "k3"}, fetch(10), "unfinished k1 is read again, first")
	require.NoError(t, b.MarkFailed(ctx, l, []outbox.Failure{{ID: "k1", Error: "boom", Delay: -time.Hour}}))
	require.NoError(t, b.Release(ctx, l, []string{"k2", "k3"}))
	require.Equal(t, []string{"k1"}, fetch(10), "failing k1 is retried alone")
	require.Equal(t, []string{"k1"}, fetch(10), "k1 is unfinished and attempted: k2, k3 stay held back")
	require.NoError(t, b.MarkSent(ctx, l, []string{"k1"}))
	require.Equal(t, []string{"k2", "k3"}, fetch(10))
	assertKeyOrder(t, c, b)
}

// testRetryBeforePosition: a keyed entry failed with a retry time earlier
// than its own position is due at its position, so it never overtakes an
// earlier, unfinished entry of its key that has no key-order member.
func testRetryBeforePosition(t *testing.T, c redis.UniversalClient) {
	ctx := testCtx(t)
	b := newBackend(t, c, Options{})
	require.NoError(t, b.Append(ctx,
		outbox.Entry{ID: "e", Topic: "t", Key: "k"},
		outbox.Entry{ID: "o", Topic: "t", Key: "other"},
		outbox.Entry{ID: "m", Topic: "t", Key: "k"}))
	l, err := b.AcquireLease(ctx, 0, "me", time.Minute)
	require.NoError(t, err)
	batch, err := b.FindPendingBatch(ctx, l, 10)
	require.NoError(t, err)
	require.Equal(t, []string{"e", "o", "m"}, ids(batch))
	require.NoError(t, b.MarkSent(ctx, l, []string{"o"}))
	require.NoError(t, b.Release(ctx, l, []string{"e"}))
	require.NoError(t, b.MarkFailed(ctx, l, []outbox.Failure{{ID: "m", Error: "boom", Delay: -time.Hour}}))
	assertKeyOrder(t, c, b, "m")
	batch, err = b.FindPendingBatch(ctx, l, 10)
	require.NoError(t, err)
	require.Equal(t, []string{"e", "m"}, ids(batch), "e comes first in its key's order; m, attempted, may follow it")
	require.NoError(t, b.MarkSent(ctx, l, ids(batch)))
	assertKeyOrder(t, c, b)
}

// testRescoreInScan: the claim re-scores a held-back entry (b) to the
// retry time of the failing entry before it (a) when that is later than
// b's score, and here that retry time is already due, so b stays in the
// range the claim is scanning, only further on: behind a, in the chunk of
// the range the claim has already read. Every entry must still come out
// once: the claim used to page through the range by an offset that did
// not count the moved entry, so its next chunk started one member early
// and returned x a second time ([a x x]), and the relay published x twice
// with no lease lost.
func testRescoreInScan(t *testing.T, c redis.UniversalClient) {
	ctx := testCtx(t)
	b := newBackend(t, c, Options{})
	now := time.Now()
	require.NoError(t, b.Append(ctx,
		outbox.Entry{ID: "a", Topic: "t", Key: "k", NotBefore: now.Add(-time.Hour)},
		outbox.Entry{ID: "b", Topic: "t", Key: "k", NotBefore: now.Add(-30 * time.Minute)},
		outbox.Entry{ID: "x", Topic: "t"}))
	l, err := b.AcquireLease(ctx, 0, "me", time.Minute)
	require.NoError(t, err)
	batch, err := b.FindPendingBatch(ctx, l, 1)
	require.NoError(t, err)
	require.Equal(t, []string{"a"}, ids(batch))
	// a retries 10 minutes ago: after b's position (30 minutes ago), and
	// due. Pending is now b (-30m), a (-10m), x (now).
	require.NoError(t, b.MarkFailed(ctx, l, []outbox.Failure{{ID: "a", Error: "boom", Delay: -10 * time.Minute}}))
	batch, err = b.FindPendingBatch(ctx, l, 10)
	require.NoError(t, err)
	require.Equal(t, []string{"a", "x"}, ids(batch), "a is retried alone in its key, b stays held back, x comes once")
	assertKeyOrder(t, c, b, "a", "b")
	scores := map[string]float64{}
	pending, err := c.ZRangeWithScores(ctx, b.parts[0].pending, 0, -1).Result()
	require.NoError(t, err)
	for _, z := range pending {
		scores[z.Member.(string)[8:]] = z.Score
	}
	assert.Equal(t, scores["a"], scores["b"], "b was re-scored to a's retry time when the scan was over")

	// b was moved to a's retry time: once a is sent, b follows, once.
	require.NoError(t, b.MarkSent(ctx, l, ids(batch)))
	batch, err = b.FindPendingBatch(ctx, l, 10)
	require.NoError(t, err)
	require.Equal(t, []string{"b"}, ids(batch))
	require.NoError(t, b.MarkSent(ctx, l, ids(batch)))
	batch, err = b.FindPendingBatch(ctx, l, 10)
	require.NoError(t, err)
	require.Empty(t, batch)
	assertKeyOrder(t, c, b)
}

// testLegacyInflight: builds before v0.2 moved claimed entries to an
// inflight zset. A new lease grant returns whatever such a build left
// there to pending with its score, so the new holder reads it first, in
// order, and nothing is lost in an upgrade.
func testLegacyInflight(t *testing.T, c redis.UniversalClient) {
	ctx := testCtx(t)
	b := newBackend(t, c, Options{})
	k := b.parts[0]
	require.NoError(t, b.Append(ctx,
		outbox.Entry{ID: "a1", Topic: "t", Key: "a"},
		outbox.Entry{ID: "b1", Topic: "t", Key: "b"},
		outbox.Entry{ID: "a2", Topic: "t", Key: "a"},
		outbox.Entry{ID: "n1", Topic: "t"}))
	// An old build's claim of a1, b1 under lease version 1: moved with
	// their scores from pending to inflight.
	claimed, err := c.ZRangeWithScores(ctx, k.pending, 0, 1).Result()
	require.NoError(t, err)
	require.Len(t, claimed, 2)
	for _, z := range claimed {
		require.NoError(t, c.ZRem(ctx, k.pending, z.Member).Err())
		require.NoError(t, c.ZAdd(ctx, k.inflight, z).Err())
	}
	require.NoError(t, c.Set(ctx, k.leasever, 1, 0).Err())
	l, err := b.AcquireLease(ctx, 0, "new", time.Minute)
	require.NoError(t, err)
	require.EqualValues(t, 2, l.Version)
	got, err := b.FindPendingBatch(ctx, l, 10)
	require.NoError(t, err)
	require.Equal(t, []string{"a1", "b1", "a2", "n1"}, ids(got))
	n, err := c.Exists(ctx, k.inflight).Result()
	require.NoError(t, err)
	assert.Zero(t, n, "the inflight set is emptied")
	require.NoError(t, b.MarkSent(ctx, l, ids(got)))
	st, err := b.Stats(ctx)
	require.NoError(t, err)
	assert.Equal(t, outbox.Stats{}, st)
}

// TestScriptsStripSafely pins what stripComments relies on: no script has
// a long string or long comment, so every line starting with "--" is a
// comment; and stripping leaves every script's code (with lib.lua, except
// the standalone append scripts, which must not carry it).
func TestScriptsStripSafely(t *testing.T) {
	t.Parallel()
	files, err := scriptFS.ReadDir("scripts")
	require.NoError(t, err)
	for _, f := range files {
		raw, err := scriptFS.ReadFile("scripts/" + f.Name())
		require.NoError(t, err)
		for _, long := range []string{"[[", "[=", "--["} {
			assert.NotContains(t, string(raw), long, "%s: long strings and comments would break stripComments", f.Name())
		}
	}
	for _, s := range allScripts {
		assert.NotContains(t, s.src, "\n--", s.name)
		switch s.name {
		case "append":
			assert.NotContains(t, s.src, "local function", s.name)
			assert.Contains(t, s.src, "HSETNX", s.name)
			continue
		case "append_keyseq":
			assert.NotContains(t, s.src, "local function", s.name)
			continue
		}
		assert.Contains(t, s.src, "local function parse(v)", s.name)
	}
}

// testRetryDelayByServerClock: MarkFailed's retry time is the server's TIME
// (rounded up to the ms) plus Delay (rounded up), whatever the caller's
// clock says; a negative Delay puts it in the past, but a keyed entry
// never before its position.
func testRetryDelayByServerClock(t *testing.T, c redis.UniversalClient) {
	ctx := testCtx(t)
	b := newBackend(t, c, Options{})
	require.NoError(t, b.Append(ctx,
		outbox.Entry{ID: "later", Topic: "t"},
		outbox.Entry{ID: "past", Topic: "t"},
		outbox.Entry{ID: "keyed", Topic: "t", Key: "k"},
		outbox.Entry{ID: "parked", Topic: "t"}))
	l, err := b.AcquireLease(ctx, 0, "me", time.Minute)
	require.NoError(t, err)
	batch, err := b.FindPendingBatch(ctx, l, 10)
	require.NoError(t, err)
	require.Len(t, batch, 4)
	scores := func() map[string]float64 {
		zs, err := c.ZRangeWithScores(ctx, b.parts[0].pending, 0, -1).Result()
		require.NoError(t, err)
		out := map[string]float64{}
		for _, z := range zs {
			out[z.Member.(string)[8:]] = z.Score
		}
		return out
	}
	position := scores()["keyed"]

	before := serverMillis(t, ctx, c)
	require.NoError(t, b.MarkFailed(ctx, l, []outbox.Failure{
		{ID: "later", Error: "x", Delay: 90*time.Second + 500*time.Microsecond},
		{ID: "past", Error: "x", Delay: -time.Hour},
		{ID: "keyed", Error: "x", Delay: -time.Hour},
		{ID: "parked", Error: "x", Delay: time.Hour, Park: true},
	}))
	after := serverMillis(t, ctx, c) + 1 // TIME rounded up
	got := scores()
	assert.GreaterOrEqual(t, got["later"], float64(before+90_001), "server time + delay, both rounded up")
	assert.LessOrEqual(t, got["later"], float64(after+90_001))
	assert.GreaterOrEqual(t, got["past"], float64(before-3_600_000))
	assert.LessOrEqual(t, got["past"], float64(after-3_600_000))
	assert.Equal(t, position, got["keyed"], "a keyed entry is never scored before its position")
	assert.NotContains(t, got, "parked")
	assertKeyOrder(t, c, b, "keyed")

	batch, err = b.FindPendingBatch(ctx, l, 10)
	require.NoError(t, err)
	assert.Equal(t, []string{"past", "keyed"}, ids(batch), "due now: the negative delays; not yet: the 90s one")
}
