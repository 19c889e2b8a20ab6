package memory_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/outboxrelay/outbox"
	"github.com/outboxrelay/outbox/backends/memory"
)

func lookup(t *testing.T, b *memory.Backend, id string) outbox.EntryInfo {
	t.Helper()
	info, err := b.Lookup(context.Background(), id)
	require.NoError(t, err)
	return info
}

func markFailed(t *testing.T, b *memory.Backend, l outbox.Lease, fs ...outbox.Failure) {
	t.Helper()
	require.NoError(t, b.MarkFailed(context.Background(), l, fs))
}

func TestAttemptHistory(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b, c := newBackend(t, 1)
	appendAll(t, b, e("a", "k"))
	var want []outbox.Attempt
	for i := range outbox.MaxAttemptHistory + 3 {
		c.Advance(time.Second)
		l := acquire(t, b, 0, fmt.Sprintf("relay-%d", i%2))
		require.Equal(t, []string{"a"}, idsOf(fetch(t, b, l, 10)))
		markFailed(t, b, l, outbox.Failure{ID: "a", Error: fmt.Sprintf("error %d", i)})
		want = append(want, outbox.Attempt{At: c.Now(), Error: fmt.Sprintf("error %d", i), Owner: l.Owner})
		require.NoError(t, b.ReleaseLease(ctx, l))
	}
	want = want[len(want)-outbox.MaxAttemptHistory:]
	info := lookup(t, b, "a")
	assert.Equal(t, want, info.History, "the last MaxAttemptHistory attempts, oldest first")
	assert.Equal(t, outbox.MaxAttemptHistory+3, info.Attempts)
	assert.Equal(t, "error 12", info.LastError)

	// The history is the caller's.
	info.History[0].Error = "changed"
	assert.Equal(t, want, lookup(t, b, "a").History)

	// Parked and requeued, the entry keeps its history.
	l := acquire(t, b, 0, "parker")
	require.Equal(t, []string{"a"}, idsOf(fetch(t, b, l, 10)))
	markFailed(t, b, l, outbox.Failure{ID: "a", Error: "poison", Park: true})
	want = append(want[1:], outbox.Attempt{At: c.Now(), Error: "poison", Owner: "parker"})
	assert.Equal(t, want, lookup(t, b, "a").History)
	n, err := b.Requeue(ctx, "a")
	require.NoError(t, err)
	require.Equal(t, 1, n)
	info = lookup(t, b, "a")
	assert.Equal(t, want, info.History, "Requeue keeps the history")
	assert.Zero(t, info.Attempts)
	assert.Equal(t, "poison", info.LastError)
}

func TestDeferred(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b, c := newBackend(t, 1)
	appendAll(t, b, e("a1", "a"), e("a2", "a"), e("b1", "b"))
	l := acquire(t, b, 0, "r")
	require.Equal(t, []string{"a1", "a2", "b1"}, idsOf(fetch(t, b, l, 10)))
	markFailed(t, b, l, outbox.Failure{ID: "a1", Error: "broker down"})
	require.NoError(t, b.Release(ctx, l, []string{"a2", "b1"}))
	require.Equal(t, []string{"a1", "b1"}, idsOf(fetch(t, b, l, 10)))
	before := lookup(t, b, "a1")

	// A Park with Deferred is refused, and nothing of the call is written.
	err := b.MarkFailed(ctx, l, []outbox.Failure{{ID: "b1", Error: "x", Delay: time.Hour}, {ID: "a1", Park: true, Deferred: true}})
	require.ErrorIs(t, err, outbox.ErrInvalidArgument)
	assert.Zero(t, lookup(t, b, "b1").Attempts)

	markFailed(t, b, l,
		outbox.Failure{ID: "a1", Error: "breaker open", Delay: time.Minute, Deferred: true},
		outbox.Failure{ID: "b1", Error: "breaker open", Delay: time.Minute, Deferred: true})
	a1 := lookup(t, b, "a1")
	assert.Equal(t, before.Attempts, a1.Attempts)
	assert.Equal(t, "broker down", a1.LastError)
	assert.Equal(t, before.History, a1.History)
	assert.True(t, a1.Deferred)
	assert.Equal(t, c.Now().Add(time.Minute), a1.DueAt)
	b1 := lookup(t, b, "b1")
	assert.True(t, b1.Deferred)
	assert.Zero(t, b1.Attempts)
	assert.Nil(t, b1.History)

	appendAll(t, b, e("b2", "b"), e("c1", "c"))
	assert.Equal(t, []string{"c1"}, idsOf(fetch(t, b, l, 10)), "a deferred entry holds back its key, even never attempted")
	c.Advance(time.Minute)
	assert.Equal(t, []string{"a1", "b1"}, idsOf(fetch(t, b, l, 10)))
	require.NoError(t, b.MarkSent(ctx, l, []string{"b1"}))
	assert.Equal(t, []string{"b2"}, idsOf(fetch(t, b, l, 10)), "sent, the deferred entry releases its key")
	markFailed(t, b, l, outbox.Failure{ID: "a1", Error: "again"})
	a1 = lookup(t, b, "a1")
	assert.Equal(t, 2, a1.Attempts, "a real failure after a deferral counts")
	assert.False(t, a1.Deferred)
	assert.Len(t, a1.History, 2)
}

func TestPauseTopic(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b, c := newBackend(t, 1)
	on := func(topic, id, key string) outbox.Entry {
		en := e(id, key)
		en.Topic = topic
		return en
	}
	appendAll(t, b, on("orders", "o1", "k"), on("mail", "m1", "k"), on("mail", "m2", "j"), on("orders", "o2", ""))
	require.NoError(t, b.PauseTopic(ctx, "orders"))
	since := c.Now()
	c.Advance(time.Second)
	require.NoError(t, b.PauseTopic(ctx, "orders"))
	p, err := b.Paused(ctx)
	require.NoError(t, err)
	assert.Equal(t, []outbox.PausedTopic{{Topic: "orders", Since: since}}, p.Topics, "pausing again keeps Since")

	l := acquire(t, b, 0, "r")
	assert.Equal(t, []string{"m2"}, idsOf(fetch(t, b, l, 10)), "o1 paused holds back m1 of its key; o2 paused")
	appendAll(t, b, on("orders", "o3", "j"), on("mail", "m3", "j"))
	assert.Empty(t, idsOf(fetch(t, b, l, 10)), "o3, appended while paused, holds back m3")
	keys, err := b.BlockedKeys(ctx, outbox.ListFilter{}, outbox.BlockedKey{}, 10)
	require.NoError(t, err)
	require.Len(t, keys, 1, "k is blocked by o1; j's head m2 is claimed and not blocking")
	assert.Equal(t, "o1", keys[0].Head.ID)
	assert.Equal(t, int64(1), keys[0].Waiting)
	assert.Zero(t, lookup(t, b, "o1").Attempts)

	require.NoError(t, b.ResumeTopic(ctx, "orders"))
	require.NoError(t, b.ResumeTopic(ctx, "orders"))
	require.NoError(t, b.MarkSent(ctx, l, []string{"m2"}))
	assert.Equal(t, []string{"o1", "m1", "o2", "o3", "m3"}, idsOf(fetch(t, b, l, 10)), "resumed: everything, in append order")

	assert.ErrorIs(t, b.PauseTopic(ctx, ""), outbox.ErrInvalidArgument)
	assert.ErrorIs(t, b.ResumeTopic(ctx, ""), outbox.ErrInvalidArgument)
}

func TestPausePartition(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b, c := newBackend(t, 2)
	appendAll(t, b, e("a", keyIn(0, 2)), e("b", keyIn(1, 2)))
	require.NoError(t, b.PausePartition(ctx, 1))
	since := c.Now()
	c.Advance(time.Second)
	require.NoError(t, b.PausePartition(ctx, 1))
	require.NoError(t, b.PausePartition(ctx, 0))
	p, err := b.Paused(ctx)
	require.NoError(t, err)
	assert.Equal(t, []outbox.PausedPartition{{Partition: 0, Since: c.Now()}, {Partition: 1, Since: since}}, p.Partitions)
	require.NoError(t, b.ResumePartition(ctx, 0))
	assert.Equal(t, []string{"a"}, idsOf(fetch(t, b, acquire(t, b, 0, "r"), 10)))
	l1 := acquire(t, b, 1, "r")
	assert.Empty(t, fetch(t, b, l1, 10))
	_, err = b.FindPendingBatch(ctx, outbox.Lease{Partition: 1, Owner: "other", Version: 9}, 10)
	assert.ErrorIs(t, err, outbox.ErrLeaseLost, "a paused partition still checks the lease")
	require.NoError(t, b.ResumePartition(ctx, 1))
	assert.Equal(t, []string{"b"}, idsOf(fetch(t, b, l1, 10)))
	assert.ErrorIs(t, b.PausePartition(ctx, 2), outbox.ErrInvalidArgument)
	assert.ErrorIs(t, b.ResumePartition(ctx, -1), outbox.ErrInvalidArgument)
}

func TestEntriesByState(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b, c := newBackend(t, 1)
	sched := e("s", "s")
	sched.NotBefore = c.Now().Add(time.Hour)
	appendAll(t, b, e("d2", "d"), e("d1", "x"), sched, e("r", "r"), e("p", "p"))
	l := acquire(t, b, 0, "r")
	require.Len(t, fetch(t, b, l, 10), 4)
	markFailed(t, b, l, outbox.Failure{ID: "r", Error: "Broker DOWN", Delay: time.Hour}, outbox.Failure{ID: "p", Error: "poison", Park: true})
	list := func(state outbox.EntryState, f outbox.ListFilter, after string, limit int) []string {
		t.Helper()
		infos, err := b.Entries(ctx, state, f, after, limit)
		require.NoError(t, err)
		return infoIDs(infos)
	}
	assert.Equal(t, []string{"d1", "d2"}, list(outbox.StateDue, outbox.ListFilter{}, "", 10))
	assert.Equal(t, []string{"d2"}, list(outbox.StateDue, outbox.ListFilter{}, "d1", 10))
	assert.Equal(t, []string{"d1"}, list(outbox.StateDue, outbox.ListFilter{}, "", 1))
	assert.Equal(t, []string{"s"}, list(outbox.StateScheduled, outbox.ListFilter{}, "", 10))
	assert.Equal(t, []string{"r"}, list(outbox.StateRetrying, outbox.ListFilter{Error: "broker down"}, "", 10))
	assert.Empty(t, list(outbox.StateRetrying, outbox.ListFilter{Error: "poison"}, "", 10))
	assert.Equal(t, []string{"p"}, list(outbox.StateParked, outbox.ListFilter{Key: "p", Topic: "t"}, "", 10))
	assert.Empty(t, list(outbox.StateDue, outbox.ListFilter{Until: c.Now()}, "", 10))
	assert.Equal(t, []string{"d1", "d2"}, list(outbox.StateDue, outbox.ListFilter{Since: c.Now(), Until: c.Now().Add(1)}, "", 10))
	c.Advance(time.Hour)
	assert.Equal(t, []string{"d1", "d2", "r", "s"}, list(outbox.StateDue, outbox.ListFilter{}, "", 10), "due once their time has come")

	_, err := b.Entries(ctx, "stuck", outbox.ListFilter{}, "", 10)
	assert.ErrorIs(t, err, outbox.ErrInvalidArgument)
	_, err = b.Entries(ctx, outbox.StateDue, outbox.ListFilter{}, "", 0)
	assert.ErrorIs(t, err, outbox.ErrInvalidArgument)
}

func TestBlockedKeys(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b, c := newBackend(t, 1)
	appendAll(t, b, e("b1", "b"), e("a1", "a"), e("a2", "a"), e("a3", "a"), e("b2", "b"), e("u", ""), e("c1", "c"))
	l := acquire(t, b, 0, "r")
	require.Len(t, fetch(t, b, l, 10), 7)
	markFailed(t, b, l, outbox.Failure{ID: "b1", Error: "x", Delay: time.Hour}, outbox.Failure{ID: "u", Error: "x", Delay: time.Hour})
	first := c.Now()
	c.Advance(time.Second)
	markFailed(t, b, l, outbox.Failure{ID: "a1", Error: "y", Delay: time.Hour})
	markFailed(t, b, l, outbox.Failure{ID: "b1", Error: "z", Delay: time.Hour})
	require.NoError(t, b.Release(ctx, l, []string{"a2", "a3", "b2", "c1"}))

	keys, err := b.BlockedKeys(ctx, outbox.ListFilter{}, outbox.BlockedKey{}, 10)
	require.NoError(t, err)
	require.Len(t, keys, 2, "c has no blocker, u no key")
	assert.Equal(t, "b1", keys[0].Head.ID)
	assert.Equal(t, first, keys[0].Since, "since the head's oldest attempt")
	assert.Equal(t, int64(1), keys[0].Waiting)
	assert.Len(t, keys[0].Head.History, 2)
	assert.Equal(t, "a1", keys[1].Head.ID)
	assert.Equal(t, int64(2), keys[1].Waiting)

	page, err := b.BlockedKeys(ctx, outbox.ListFilter{}, keys[0], 10)
	require.NoError(t, err)
	assert.Equal(t, keys[1:], page)
	page, err = b.BlockedKeys(ctx, outbox.ListFilter{Error: "Y"}, outbox.BlockedKey{}, 10)
	require.NoError(t, err)
	assert.Equal(t, keys[1:], page)
	_, err = b.BlockedKeys(ctx, outbox.ListFilter{}, outbox.BlockedKey{}, -1)
	assert.ErrorIs(t, err, outbox.ErrInvalidArgument)

	ps, err := b.PartitionStats(ctx)
	require.NoError(t, err)
	assert.Equal(t, int64(2), ps[0].BlockedKeys)
	assert.Equal(t, "a2", ps[0].OldestDueID, "the oldest due entry, held back behind a1")
}

func TestMembers(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b, c := newBackend(t, 2)
	started := c.Now().Add(-time.Hour)
	long := strings.Repeat("h", 300)
	_, err := b.Heartbeat(ctx, outbox.Member{Owner: "r2", Partitions: []int{1}, Host: long, Version: "v1.2.3", Started: started}, time.Minute)
	require.NoError(t, err)
	_, err = b.Heartbeat(ctx, outbox.Member{Owner: "r1", Host: "a", Version: "é" + strings.Repeat("v", 254)}, time.Second)
	require.NoError(t, err)
	got, err := b.Members(ctx)
	require.NoError(t, err)
	require.Len(t, got, 2)
	assert.Equal(t, "r1", got[0].Owner)
	assert.Equal(t, "é"+strings.Repeat("v", 253), got[0].Version, "cut at 255 bytes, at a rune boundary")
	assert.Equal(t, outbox.Member{Owner: "r2", Partitions: []int{1}, Host: long[:255], Version: "v1.2.3", Started: started, Expires: c.Now().Add(time.Minute), Renewed: c.Now()}, got[1])
	c.Advance(time.Second)
	got, err = b.Members(ctx)
	require.NoError(t, err)
	require.Len(t, got, 1, "r1's record expired")
	assert.Equal(t, "r2", got[0].Owner)
}

func TestMoveCarriesHistory(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	src, _ := newBackend(t, 1)
	appendAll(t, src, e("a1", "a"), e("b1", "b"))
	l := acquire(t, src, 0, "r")
	require.Len(t, fetch(t, src, l, 10), 2)
	markFailed(t, src, l, outbox.Failure{ID: "a1", Error: "x", Delay: time.Hour}, outbox.Failure{ID: "b1", Delay: time.Hour, Deferred: true})
	out := export(t, src, l, 10)
	require.Len(t, out, 2)
	assert.Len(t, out[0].History, 1)
	assert.True(t, out[1].Deferred)

	dst, _ := newBackend(t, 1)
	require.Equal(t, 2, importAll(t, dst, out...))
	assert.Equal(t, out[0].History, lookup(t, dst, "a1").History)
	assert.True(t, lookup(t, dst, "b1").Deferred)
	appendAll(t, dst, e("b2", "b"))
	keys, err := dst.BlockedKeys(ctx, outbox.ListFilter{}, outbox.BlockedKey{}, 10)
	require.NoError(t, err)
	require.Len(t, keys, 2, "the imported deferred entry still holds back its key")
}
