package redisoutbox

import (
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/outboxrelay/outbox"
)

// TestOperate covers the operator SPI of issue 28 on Redis and Redis
// Cluster: the attempt history and deferrals (MarkFailed), pauses, the
// fleet (Members) and the listings (Entries, BlockedKeys,
// PartitionStats).
func TestOperate(t *testing.T) {
	t.Parallel()
	for _, tg := range targets {
		t.Run(tg.name, func(t *testing.T) {
			t.Parallel()
			c := tg.client(t)
			t.Run("HistoryKeepsTheLastAttempts", func(t *testing.T) { t.Parallel(); testHistory(t, c) })
			t.Run("SentAndCancelledLeaveNoHistory", func(t *testing.T) { t.Parallel(); testHistoryNoLeak(t, c) })
			t.Run("DeferredIsNotAnAttemptAndHoldsBackItsKey", func(t *testing.T) { t.Parallel(); testDeferred(t, c) })
			t.Run("DeferredDueAgainStopsItsKey", func(t *testing.T) { t.Parallel(); testDeferredStopsItsKey(t, c) })
			t.Run("RequeueKeepsHistoryClearsDeferred", func(t *testing.T) { t.Parallel(); testRequeueHistory(t, c) })
			t.Run("PauseTopicSkipsItAndHoldsBackItsKeys", func(t *testing.T) { t.Parallel(); testPauseTopic(t, c) })
			t.Run("PausedCrowdIsSetAside", func(t *testing.T) { t.Parallel(); testPausedCrowd(t, c) })
			t.Run("PausePartitionClaimsNothing", func(t *testing.T) { t.Parallel(); testPausePartition(t, c) })
			t.Run("PauseCutMidwayIsCompletedAndReported", func(t *testing.T) { t.Parallel(); testPauseCut(t, c) })
			t.Run("MembersReportsTheFleet", func(t *testing.T) { t.Parallel(); testMembers(t, c) })
			t.Run("EntriesByStateInByteOrder", func(t *testing.T) { t.Parallel(); testEntriesByState(t, c) })
			t.Run("EntriesFilters", func(t *testing.T) { t.Parallel(); testEntriesFilters(t, c) })
			t.Run("ParkedPagesMergePartitions", func(t *testing.T) { t.Parallel(); testParkedPaging(t, c) })
			t.Run("BlockedKeys", func(t *testing.T) { t.Parallel(); testBlockedKeys(t, c) })
			t.Run("MoveCarriesHistory", func(t *testing.T) { t.Parallel(); testMoveHistory(t, c) })
		})
	}
}

// TestMaxHistoryMatchesTheSPI: lib.lua keeps as many attempts as the SPI
// says.
func TestMaxHistoryMatchesTheSPI(t *testing.T) {
	t.Parallel()
	lib, err := os.ReadFile("scripts/lib.lua")
	require.NoError(t, err)
	m := regexp.MustCompile(`(?m)^local MAX_HISTORY = (\d+)$`).FindSubmatch(lib)
	require.NotNil(t, m, "lib.lua defines MAX_HISTORY")
	assert.Equal(t, fmt.Sprint(outbox.MaxAttemptHistory), string(m[1]))
}

func TestHistoryEncoding(t *testing.T) {
	t.Parallel()
	var in []outbox.Attempt
	for i := range 12 {
		in = append(in, outbox.Attempt{At: time.UnixMilli(int64(1000 + i)), Error: fmt.Sprint("err ", i), Owner: "o"})
	}
	got, deferred := decodeHistory(encodeHistory(in, true))
	assert.True(t, deferred)
	assert.Equal(t, in[2:], got, "the last MaxAttemptHistory are kept")
	assert.Equal(t, "", encodeHistory(nil, false), "nothing to keep: no field")
	got, deferred = decodeHistory(encodeHistory(nil, true))
	assert.Nil(t, got)
	assert.True(t, deferred)
	h := encodeHistory(in[:2], false)
	got, _ = decodeHistory(h[:len(h)-1])
	assert.Equal(t, in[:1], got, "a truncated attempt ends the history")
	got, _ = decodeHistory("\x09\x00")
	assert.Nil(t, got, "another version reads as none")
}

func lease(t *testing.T, b *Backend, p int, owner string) outbox.Lease {
	t.Helper()
	l, err := b.AcquireLease(testCtx(t), p, owner, time.Minute)
	require.NoError(t, err)
	return l
}

func lookup(t *testing.T, b *Backend, id string) outbox.EntryInfo {
	t.Helper()
	info, err := b.Lookup(testCtx(t), id)
	require.NoError(t, err)
	return info
}

func testHistory(t *testing.T, c redis.UniversalClient) {
	ctx := testCtx(t)
	b := newBackend(t, c, Options{})
	require.NoError(t, b.Append(ctx, outbox.Entry{ID: "e", Topic: "t", Key: "k"}))
	before := serverMillis(t, ctx, c)
	for i := range 12 {
		l := lease(t, b, 0, fmt.Sprint("relay-", i%2))
		require.NoError(t, b.MarkFailed(ctx, l, []outbox.Failure{{ID: "e", Error: fmt.Sprint("broker error ", i), Delay: -time.Second}}))
		require.NoError(t, b.ReleaseLease(ctx, l))
	}
	after := serverMillis(t, ctx, c)
	info := lookup(t, b, "e")
	assert.Equal(t, 12, info.Attempts)
	assert.Equal(t, "broker error 11", info.LastError)
	require.Len(t, info.History, outbox.MaxAttemptHistory)
	for j, a := range info.History {
		i := j + 2
		assert.Equal(t, fmt.Sprint("broker error ", i), a.Error, "oldest first, the last ten")
		assert.Equal(t, fmt.Sprint("relay-", i%2), a.Owner, "the owner of the lease MarkFailed was called with")
		assert.True(t, a.At.UnixMilli() >= before && a.At.UnixMilli() <= after, "the server's time")
		if j > 0 {
			assert.False(t, a.At.Before(info.History[j-1].At))
		}
	}
	assert.False(t, info.Deferred)

	// A park is an attempt too, and the parked entry keeps its history.
	l := lease(t, b, 0, "parker")
	require.NoError(t, b.MarkFailed(ctx, l, []outbox.Failure{{ID: "e", Error: "poison", Park: true}}))
	info = lookup(t, b, "e")
	require.True(t, info.Parked)
	require.Len(t, info.History, outbox.MaxAttemptHistory)
	assert.Equal(t, outbox.Attempt{At: info.History[9].At, Error: "poison", Owner: "parker"}, info.History[9])

	// An entry never attempted has no history.
	require.NoError(t, b.Append(ctx, outbox.Entry{ID: "fresh", Topic: "t"}))
	assert.Nil(t, lookup(t, b, "fresh").History)
}

func testHistoryNoLeak(t *testing.T, c redis.UniversalClient) {
	ctx := testCtx(t)
	b := newBackend(t, c, Options{Partitions: 2})
	var es []outbox.Entry
	for i := range 6 {
		es = append(es, outbox.Entry{ID: fmt.Sprint("e", i), Topic: "t", Key: fmt.Sprint("k", i)})
	}
	require.NoError(t, b.Append(ctx, es...))
	for p := range 2 {
		l := lease(t, b, p, "me")
		got, err := b.FindPendingBatch(ctx, l, 10)
		require.NoError(t, err)
		var fs []outbox.Failure
		for i, e := range got {
			fs = append(fs, outbox.Failure{ID: e.ID, Error: "x", Delay: -time.Second, Deferred: i%2 == 1})
		}
		require.NoError(t, b.MarkFailed(ctx, l, fs))
		n, err := c.HLen(ctx, b.parts[p].history).Result()
		require.NoError(t, err)
		require.EqualValues(t, len(got), n, "every failed or deferred entry has a history field")
		got, err = b.FindPendingBatch(ctx, l, 10)
		require.NoError(t, err)
		require.Len(t, got, int(n))
		if len(got) > 0 {
			require.NoError(t, b.Cancel(ctx, got[0].ID))
			require.NoError(t, b.MarkSent(ctx, l, ids(got[1:])))
		}
	}
	for p := range 2 {
		n, err := c.Exists(ctx, b.parts[p].history).Result()
		require.NoError(t, err)
		assert.Zero(t, n, "no history is left once every entry was sent or cancelled")
	}
}

func testDeferred(t *testing.T, c redis.UniversalClient) {
	ctx := testCtx(t)
	b := newBackend(t, c, Options{})
	require.NoError(t, b.Append(ctx,
		outbox.Entry{ID: "a1", Topic: "t", Key: "k"},
		outbox.Entry{ID: "a2", Topic: "t", Key: "k"},
		outbox.Entry{ID: "b1", Topic: "t", Key: "other"}))
	l := lease(t, b, 0, "me")
	got, err := b.FindPendingBatch(ctx, l, 10)
	require.NoError(t, err)
	require.Equal(t, []string{"a1", "a2", "b1"}, ids(got))
	// A first real failure, then the breaker opens.
	require.NoError(t, b.MarkFailed(ctx, l, []outbox.Failure{{ID: "b1", Error: "broker down", Delay: -time.Second}}))
	err = b.MarkFailed(ctx, l, []outbox.Failure{{ID: "a1", Error: "breaker", Park: true, Deferred: true}})
	require.ErrorIs(t, err, outbox.ErrInvalidArgument)
	assert.Contains(t, err.Error(), "Park and Deferred")
	assert.Zero(t, lookup(t, b, "a1").Attempts, "nothing was written")
	before := serverMillis(t, ctx, c)
	require.NoError(t, b.MarkFailed(ctx, l, []outbox.Failure{
		{ID: "a1", Error: "breaker open", Delay: time.Hour, Deferred: true},
		{ID: "b1", Error: "breaker open", Delay: time.Hour, Deferred: true},
	}))
	a1 := lookup(t, b, "a1")
	assert.True(t, a1.Deferred)
	assert.Zero(t, a1.Attempts, "a deferral is not an attempt")
	assert.Empty(t, a1.LastError)
	assert.Nil(t, a1.History)
	assert.GreaterOrEqual(t, a1.DueAt.UnixMilli(), before+time.Hour.Milliseconds(), "re-scored Delay after now")
	b1 := lookup(t, b, "b1")
	assert.True(t, b1.Deferred)
	assert.Equal(t, 1, b1.Attempts)
	assert.Equal(t, "broker down", b1.LastError, "the real error is kept")
	require.Len(t, b1.History, 1)
	assert.Equal(t, "broker down", b1.History[0].Error)

	got, err = b.FindPendingBatch(ctx, l, 10)
	require.NoError(t, err)
	assert.Empty(t, ids(got), "a2 waits behind its deferred head a1")
	st, err := b.Stats(ctx)
	require.NoError(t, err)
	assert.EqualValues(t, 1, st.Due, "a1 and b1 are due at their deferral time; a2, held back, by its own")
	due, err := b.Entries(ctx, outbox.StateDue, outbox.ListFilter{}, "", 10)
	require.NoError(t, err)
	require.Len(t, due, 1)
	assert.Equal(t, "a2", due[0].ID)
	for _, st := range []outbox.EntryState{outbox.StateScheduled, outbox.StateRetrying} {
		es, err := b.Entries(ctx, st, outbox.ListFilter{}, "", 10)
		require.NoError(t, err)
		want := map[outbox.EntryState]string{outbox.StateScheduled: "a1", outbox.StateRetrying: "b1"}[st]
		require.Len(t, es, 1, st)
		assert.Equal(t, want, es[0].ID, "a deferral before the first attempt is scheduled; after it, retrying")
	}
	bk, err := b.BlockedKeys(ctx, outbox.ListFilter{Key: "k"}, outbox.BlockedKey{}, 10)
	require.NoError(t, err)
	require.Len(t, bk, 1)
	assert.Equal(t, "a1", bk[0].Head.ID)
	assert.EqualValues(t, 1, bk[0].Waiting)
	assert.True(t, bk[0].Since.Equal(a1.CreatedAt), "deferred before any attempt: blocked since it was created")

	// Due again: a1 comes back. (a2 was re-scored behind it by the last
	// claim, to a1's deferral time then: it comes at that time, late,
	// never before a1.)
	require.NoError(t, b.MarkFailed(ctx, l, []outbox.Failure{{ID: "a1", Delay: -time.Second, Deferred: true}}))
	got, err = b.FindPendingBatch(ctx, l, 10)
	require.NoError(t, err)
	assert.Equal(t, []string{"a1"}, ids(got))
	require.NoError(t, b.MarkSent(ctx, l, []string{"a1"}))
	_, err = b.Lookup(ctx, "a1")
	require.ErrorIs(t, err, outbox.ErrNotFound)

	// Deferred and due again before any claim held a later entry back: the
	// head comes, and the later entries of its key once it is sent (see
	// testDeferredStopsItsKey).
	require.NoError(t, b.Append(ctx, outbox.Entry{ID: "k1", Topic: "t", Key: "key"}, outbox.Entry{ID: "k2", Topic: "t", Key: "key"}))
	require.NoError(t, b.MarkFailed(ctx, l, []outbox.Failure{{ID: "k1", Delay: -time.Second, Deferred: true}}))
	got, err = b.FindPendingBatch(ctx, l, 10)
	require.NoError(t, err)
	assert.Equal(t, []string{"k1"}, ids(got))
}

func testRequeueHistory(t *testing.T, c redis.UniversalClient) {
	ctx := testCtx(t)
	b := newBackend(t, c, Options{})
	require.NoError(t, b.Append(ctx, outbox.Entry{ID: "e", Topic: "t", Key: "k"}))
	l := lease(t, b, 0, "me")
	require.NoError(t, b.MarkFailed(ctx, l, []outbox.Failure{{ID: "e", Error: "first", Delay: -time.Second}}))
	require.NoError(t, b.MarkFailed(ctx, l, []outbox.Failure{{ID: "e", Delay: -time.Second, Deferred: true}}))
	require.True(t, lookup(t, b, "e").Deferred)
	require.NoError(t, b.MarkFailed(ctx, l, []outbox.Failure{{ID: "e", Error: "second", Park: true}}))
	info := lookup(t, b, "e")
	assert.False(t, info.Deferred, "a parked entry is not deferred")
	n, err := b.Requeue(ctx, "e")
	require.NoError(t, err)
	require.Equal(t, 1, n)
	info = lookup(t, b, "e")
	assert.Zero(t, info.Attempts)
	assert.False(t, info.Deferred)
	require.Len(t, info.History, 2, "Requeue keeps the history")
	assert.Equal(t, []string{"first", "second"}, []string{info.History[0].Error, info.History[1].Error})
}

func testPauseTopic(t *testing.T, c redis.UniversalClient) {
	ctx := testCtx(t)
	b := newBackend(t, c, Options{Partitions: 2})
	require.ErrorIs(t, b.PauseTopic(ctx, ""), outbox.ErrInvalidArgument)
	require.ErrorIs(t, b.ResumeTopic(ctx, ""), outbox.ErrInvalidArgument)
	p := outbox.PartitionOf("k", 2)
	ks := func(key string) string { // another key of partition p
		for i := 0; ; i++ {
			if k := fmt.Sprint(key, i); outbox.PartitionOf(k, 2) == p {
				return k
			}
		}
	}
	k2 := ks("z")
	require.NoError(t, b.PauseTopic(ctx, "stop"))
	before := serverMillis(t, ctx, c)
	require.NoError(t, b.PauseTopic(ctx, "stop"), "idempotent")
	require.NoError(t, b.Append(ctx,
		outbox.Entry{ID: "go1", Topic: "go", Key: "k"},
		outbox.Entry{ID: "stop1", Topic: "stop", Key: "k"},
		outbox.Entry{ID: "go2", Topic: "go", Key: "k"}, // held back behind stop1
		outbox.Entry{ID: "stop2", Topic: "stop"},
		outbox.Entry{ID: "go3", Topic: "go", Key: k2},
		outbox.Entry{ID: "go4", Topic: "go"}))
	paused, err := b.Paused(ctx)
	require.NoError(t, err)
	require.Len(t, paused.Topics, 1)
	assert.Equal(t, "stop", paused.Topics[0].Topic)
	assert.Less(t, paused.Topics[0].Since.UnixMilli(), before+1, "pausing a paused topic keeps its Since")
	assert.Empty(t, paused.Partitions)

	fetchAll := func() []string { // and send what it fetched
		var all []string
		for q := range 2 {
			l := lease(t, b, q, "me")
			got, err := b.FindPendingBatch(ctx, l, 100)
			require.NoError(t, err)
			require.NoError(t, b.MarkSent(ctx, l, ids(got)))
			all = append(all, ids(got)...)
		}
		return all
	}
	got := fetchAll()
	assert.ElementsMatch(t, []string{"go1", "go3", "go4"}, got, "the paused topic's entries and the later entries of their keys wait")
	bk, err := b.BlockedKeys(ctx, outbox.ListFilter{}, outbox.BlockedKey{}, 10)
	require.NoError(t, err)
	require.Len(t, bk, 1)
	assert.Equal(t, "stop1", bk[0].Head.ID)
	assert.EqualValues(t, 1, bk[0].Waiting)
	assert.Zero(t, lookup(t, b, "stop1").Attempts, "no attempt is counted")

	require.NoError(t, b.ResumeTopic(ctx, "stop"))
	require.NoError(t, b.ResumeTopic(ctx, "stop"), "idempotent")
	paused, err = b.Paused(ctx)
	require.NoError(t, err)
	assert.True(t, paused.Empty())
	got = fetchAll()
	assert.ElementsMatch(t, []string{"stop1", "go2", "stop2"}, got, "all that waited, at the next fetch")
	assert.Less(t, indexOf(got, "stop1"), indexOf(got, "go2"), "in key order")
	for q := range 2 {
		n, err := c.Exists(ctx, b.parts[q].paused).Result()
		require.NoError(t, err)
		assert.Zero(t, n, "a resume leaves no paused hash: the claim is back to its unpaused cost")
	}
}

func testPausePartition(t *testing.T, c redis.UniversalClient) {
	ctx := testCtx(t)
	b := newBackend(t, c, Options{Partitions: 2})
	require.ErrorIs(t, b.PausePartition(ctx, 2), outbox.ErrInvalidArgument)
	require.ErrorIs(t, b.ResumePartition(ctx, -1), outbox.ErrInvalidArgument)
	require.NoError(t, b.Append(ctx, outbox.Entry{ID: "e", Topic: "t"}))
	p := outbox.PartitionOf("", 2)
	l := lease(t, b, p, "me")
	require.NoError(t, b.PausePartition(ctx, p))
	got, err := b.FindPendingBatch(ctx, l, 10)
	require.NoError(t, err)
	assert.Empty(t, got)
	_, err = b.FindPendingBatch(ctx, outbox.Lease{Partition: p, Owner: "stale", Version: l.Version - 1}, 10)
	require.ErrorIs(t, err, outbox.ErrLeaseLost, "the lease is still checked")
	paused, err := b.Paused(ctx)
	require.NoError(t, err)
	require.Equal(t, []int{p}, []int{paused.Partitions[0].Partition})
	assert.Empty(t, paused.Topics)
	require.NoError(t, b.ResumePartition(ctx, p))
	got, err = b.FindPendingBatch(ctx, l, 10)
	require.NoError(t, err)
	assert.Equal(t, []string{"e"}, ids(got))
}

// testPauseCut: a PauseTopic cut after the record (the first write) is
// reported paused and completed by calling it again; a topic paused in a
// partition without a record (a pause that raced a resume) is reported
// too, and a resume clears it.
func testPauseCut(t *testing.T, c redis.UniversalClient) {
	ctx := testCtx(t)
	b := newBackend(t, c, Options{Partitions: 3})
	since, err := scriptPause.Run(ctx, c, []string{b.pauses}, "t:cut", "pause").Int64()
	require.NoError(t, err)
	require.NoError(t, c.HSet(ctx, b.parts[0].paused, "cut", since).Err()) // the crash came after one partition
	paused, err := b.Paused(ctx)
	require.NoError(t, err)
	require.Len(t, paused.Topics, 1)
	assert.Equal(t, since, paused.Topics[0].Since.UnixMilli())
	require.NoError(t, b.PauseTopic(ctx, "cut"))
	for p := range 3 {
		v, err := c.HGet(ctx, b.parts[p].paused, "cut").Int64()
		require.NoError(t, err, "partition %d", p)
		assert.Equal(t, since, v, "every partition holds the record's Since")
	}
	require.NoError(t, c.HSet(ctx, b.parts[2].paused, "orphan", 5).Err())
	paused, err = b.Paused(ctx)
	require.NoError(t, err)
	require.Len(t, paused.Topics, 2)
	assert.Equal(t, "orphan", paused.Topics[1].Topic, "a partition's pause without a record is reported")
	require.NoError(t, b.ResumeTopic(ctx, "orphan"))
	require.NoError(t, b.ResumeTopic(ctx, "cut"))
	paused, err = b.Paused(ctx)
	require.NoError(t, err)
	assert.True(t, paused.Empty())
}

func testMembers(t *testing.T, c redis.UniversalClient) {
	ctx := testCtx(t)
	b := newBackend(t, c, Options{Partitions: 4})
	started := time.Date(2026, 1, 2, 3, 4, 5, 6789, time.UTC)
	long := strings.Repeat("h", 300)
	before := serverMillis(t, ctx, c)
	got, err := b.Heartbeat(ctx, outbox.Member{Owner: "b", Partitions: []int{1}, Host: long, Version: "v1.2.3", Started: started}, time.Minute)
	require.NoError(t, err)
	require.Len(t, got, 1)
	assert.Equal(t, long[:255], got[0].Host, "cut at 255 bytes")
	_, err = b.Heartbeat(ctx, outbox.Member{Owner: "a", Host: "h2"}, time.Minute)
	require.NoError(t, err)
	ms, err := b.Members(ctx)
	require.NoError(t, err)
	require.Equal(t, []string{"a", "b"}, owners(ms))
	m := ms[1]
	assert.Equal(t, long[:255], m.Host)
	assert.Equal(t, "v1.2.3", m.Version)
	assert.True(t, m.Started.Equal(started), "%v", m.Started)
	assert.Equal(t, []int{1}, m.Partitions)
	assert.GreaterOrEqual(t, m.Renewed.UnixMilli(), before)
	assert.Equal(t, m.Renewed.Add(time.Minute).UnixMilli(), m.Expires.UnixMilli())
	assert.True(t, ms[0].Started.IsZero())
	require.NoError(t, b.Leave(ctx, "b"))
	ms, err = b.Members(ctx)
	require.NoError(t, err)
	assert.Equal(t, []string{"a"}, owners(ms))
	n, err := c.HLen(ctx, b.memberInfo).Result()
	require.NoError(t, err)
	assert.EqualValues(t, 1, n, "Leave deletes the info with the record")
	// An expired record is not listed.
	require.NoError(t, c.HSet(ctx, b.members, "a", memberRecord(1, 0)).Err())
	ms, err = b.Members(ctx)
	require.NoError(t, err)
	assert.Empty(t, ms)
}

func indexOf(ss []string, s string) int {
	for i, v := range ss {
		if v == s {
			return i
		}
	}
	return -1
}

// testMoveHistory: Export and Import carry the attempt history and the
// deferral; RemoveExported deletes the history with the entry.
func testMoveHistory(t *testing.T, c redis.UniversalClient) {
	ctx := testCtx(t)
	src := newBackend(t, c, Options{})
	dst := newBackend(t, c, Options{Partitions: 2})
	require.NoError(t, src.Append(ctx,
		outbox.Entry{ID: "f", Topic: "t", Key: "kf"},
		outbox.Entry{ID: "d", Topic: "t", Key: "kd"},
		outbox.Entry{ID: "d2", Topic: "t", Key: "kd"},
		outbox.Entry{ID: "p", Topic: "t"}))
	l := lease(t, src, 0, "mover")
	require.NoError(t, src.MarkFailed(ctx, l, []outbox.Failure{
		{ID: "f", Error: "one", Delay: -time.Second},
		{ID: "d", Delay: time.Hour, Deferred: true},
		{ID: "p", Error: "poison", Park: true},
	}))
	require.NoError(t, src.MarkFailed(ctx, l, []outbox.Failure{{ID: "f", Error: "two", Delay: time.Hour}}))
	exported, err := src.ExportBatch(ctx, l, 10)
	require.NoError(t, err)
	require.Len(t, exported, 4)
	n, err := dst.Import(ctx, exported)
	require.NoError(t, err)
	require.Equal(t, 4, n)
	for _, id := range []string{"f", "d", "p"} {
		want, got := lookup(t, src, id), lookup(t, dst, id)
		assert.Equal(t, want.History, got.History, id)
		assert.Equal(t, want.Deferred, got.Deferred, id)
		assert.Equal(t, want.DueAt.UnixMilli(), got.DueAt.UnixMilli(), id)
	}
	assert.True(t, lookup(t, dst, "d").Deferred)
	assert.Len(t, lookup(t, dst, "f").History, 2)
	assert.Len(t, lookup(t, dst, "p").History, 1)
	for q := range 2 {
		dl := lease(t, dst, q, "relay")
		got, err := dst.FindPendingBatch(ctx, dl, 10)
		require.NoError(t, err)
		assert.NotContains(t, ids(got), "d2", "d, deferred, still holds back its key after the move")
	}
	require.NoError(t, src.RemoveExported(ctx, l, ids(infosEntries(exported))))
	m, err := c.Exists(ctx, src.parts[0].history).Result()
	require.NoError(t, err)
	assert.Zero(t, m, "RemoveExported deletes the history")
}

func infosEntries(infos []outbox.EntryInfo) []outbox.Entry {
	out := make([]outbox.Entry, len(infos))
	for i := range infos {
		out[i] = infos[i].Entry
	}
	return out
}

// pauseBand is lib.lua's PAUSE_BAND.
const pauseBand = 1125899906842624

// testPausedCrowd: a crowd of a paused topic's due entries in front of
// the others costs a few scans, not every claim: the claims set it aside
// (the band), while Lookup, Stats and Entries report its entries as they
// were; ResumeTopic moves them back, in key order.
func testPausedCrowd(t *testing.T, c redis.UniversalClient) {
	ctx := testCtx(t)
	b := newBackend(t, c, Options{})
	require.NoError(t, b.PauseTopic(ctx, "p"))
	var es []outbox.Entry
	const n = 900
	for i := range n {
		key := ""
		if i%3 == 0 {
			key = fmt.Sprint("k", i%30)
		}
		es = append(es, outbox.Entry{ID: fmt.Sprintf("p%04d", i), Topic: "p", Key: key})
	}
	es = append(es, outbox.Entry{ID: "q-free", Topic: "q"}, outbox.Entry{ID: "q-held", Topic: "q", Key: "k0"})
	require.NoError(t, b.Append(ctx, es...))
	before := lookup(t, b, "p0000")
	l := lease(t, b, 0, "me")
	const limit = 10
	budget := 2*limit + 256
	var got []string
	fetches := 0
	for ; fetches < n/budget+2 && len(got) == 0; fetches++ {
		batch, err := b.FindPendingBatch(ctx, l, limit)
		require.NoError(t, err)
		got = ids(batch)
	}
	assert.Equal(t, []string{"q-free"}, got, "after %d fetches: the other topic flows; q-held waits behind k0's paused head", fetches)
	require.NoError(t, b.MarkSent(ctx, l, got))
	after := lookup(t, b, "p0000")
	assert.Equal(t, before.DueAt, after.DueAt, "set aside, its due time is reported as it was")
	st, err := b.Stats(ctx)
	require.NoError(t, err)
	assert.EqualValues(t, n+1, st.Due, "set-aside entries are still due")
	due, err := b.Entries(ctx, outbox.StateDue, outbox.ListFilter{Topic: "p"}, "", 2000)
	require.NoError(t, err)
	assert.Len(t, due, n)
	inBand, err := c.ZCount(ctx, b.parts[0].pending, fmt.Sprint(pauseBand), "+inf").Result()
	require.NoError(t, err)
	assert.Positive(t, inBand)

	require.NoError(t, b.ResumeTopic(ctx, "p"))
	inBand, err = c.ZCount(ctx, b.parts[0].pending, fmt.Sprint(pauseBand), "+inf").Result()
	require.NoError(t, err)
	assert.Zero(t, inBand, "ResumeTopic moves every set-aside entry back")
	var all []string
	for range 20 {
		batch, err := b.FindPendingBatch(ctx, l, 1000)
		require.NoError(t, err)
		if len(batch) == 0 {
			break
		}
		require.NoError(t, b.MarkSent(ctx, l, ids(batch)))
		all = append(all, ids(batch)...)
	}
	require.Len(t, all, n+1)
	assert.Less(t, indexOf(all, "p0000"), indexOf(all, "q-held"), "key order: k0's paused head before q-held")
	last := map[string]int{}
	for i, id := range all {
		if id == "q-held" {
			continue
		}
		var j int
		_, _ = fmt.Sscanf(id, "p%04d", &j)
		if j%3 == 0 {
			k := fmt.Sprint("k", j%30)
			if prev, ok := last[k]; ok {
				assert.Less(t, prev, j, "key %s out of order at %d", k, i)
			}
			last[k] = j
		}
	}
}

func TestPauseBandMatchesLib(t *testing.T) {
	t.Parallel()
	lib, err := os.ReadFile("scripts/lib.lua")
	require.NoError(t, err)
	m := regexp.MustCompile(`(?m)^local PAUSE_BAND = (\d+)$`).FindSubmatch(lib)
	require.NotNil(t, m)
	assert.Equal(t, fmt.Sprint(pauseBand), string(m[1]))
}

// testDeferredStopsItsKey: a deferred entry due again is returned, but
// not the later entries of its key in the same call (as for an attempted
// one); after it is sent they come.
func testDeferredStopsItsKey(t *testing.T, c redis.UniversalClient) {
	ctx := testCtx(t)
	b := newBackend(t, c, Options{})
	require.NoError(t, b.Append(ctx,
		outbox.Entry{ID: "a1", Topic: "t", Key: "a"}, outbox.Entry{ID: "a2", Topic: "t", Key: "a"},
		outbox.Entry{ID: "b1", Topic: "t", Key: "b"}, outbox.Entry{ID: "b2", Topic: "t", Key: "b"}))
	l := lease(t, b, 0, "me")
	got, err := b.FindPendingBatch(ctx, l, 10)
	require.NoError(t, err)
	require.Equal(t, []string{"a1", "a2", "b1", "b2"}, ids(got))
	require.NoError(t, b.MarkFailed(ctx, l, []outbox.Failure{{ID: "a1", Deferred: true}, {ID: "b1", Deferred: true}}))
	got, err = b.FindPendingBatch(ctx, l, 10)
	require.NoError(t, err)
	assert.Equal(t, []string{"a1", "b1"}, ids(got))
	require.NoError(t, b.MarkSent(ctx, l, []string{"a1", "b1"}))
	got, err = b.FindPendingBatch(ctx, l, 10)
	require.NoError(t, err)
	assert.Equal(t, []string{"a2", "b2"}, ids(got))
}
