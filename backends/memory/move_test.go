package memory_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/outboxrelay/outbox"
	"github.com/outboxrelay/outbox/backends/memory"
)

func export(t *testing.T, b *memory.Backend, l outbox.Lease, limit int) []outbox.EntryInfo {
	t.Helper()
	out, err := b.ExportBatch(context.Background(), l, limit)
	require.NoError(t, err)
	return out
}

func infoIDs(infos []outbox.EntryInfo) []string {
	ids := make([]string, len(infos))
	for i, info := range infos {
		ids[i] = info.ID
	}
	return ids
}

func importAll(t *testing.T, b *memory.Backend, infos ...outbox.EntryInfo) int {
	t.Helper()
	n, err := b.Import(context.Background(), infos)
	require.NoError(t, err)
	return n
}

// info returns an exported entry of key, due at due, as a source would
// report it.
func info(id, key string, due time.Time) outbox.EntryInfo {
	en := e(id, key)
	en.CreatedAt = due
	return outbox.EntryInfo{Entry: en, DueAt: due}
}

func TestExportEveryStateInAppendOrder(t *testing.T) {
	ctx := context.Background()
	b, c := newBackend(t, 1)
	sched := e("sched", "s")
	sched.NotBefore = c.Now().Add(time.Hour)
	appendAll(t, b, e("a1", "a"), e("b1", "b"), e("a2", "a"), sched, e("c1", "c"), e("d1", "d"))
	l := acquire(t, b, 0, "r")
	require.Equal(t, []string{"a1", "b1", "a2", "c1", "d1"}, idsOf(fetch(t, b, l, 10)))
	require.NoError(t, b.MarkFailed(ctx, l, []outbox.Failure{
		{ID: "a1", Error: "retry", Delay: time.Minute},
		{ID: "b1", Error: "poison", Park: true},
	}))
	require.NoError(t, b.Release(ctx, l, []string{"a2"})) // held back behind a1
	// c1 and d1 stay claimed by l; the lease expires and another takes it.
	c.Advance(ttl + time.Second)
	l2 := acquire(t, b, 0, "mover")

	got := export(t, b, l2, 100)
	assert.Equal(t, []string{"a1", "b1", "a2", "sched", "c1", "d1"}, infoIDs(got))
	byID := map[string]outbox.EntryInfo{}
	for _, in := range got {
		byID[in.ID] = in
	}
	assert.Equal(t, 1, byID["a1"].Attempts)
	assert.Equal(t, "retry", byID["a1"].LastError)
	assert.False(t, byID["a1"].Parked)
	assert.True(t, byID["b1"].Parked)
	assert.True(t, byID["b1"].DueAt.IsZero())
	assert.Equal(t, sched.NotBefore, byID["sched"].DueAt)
	assert.Equal(t, []byte("c1"), byID["c1"].Payload)

	// A limit pages from the front; nothing changed.
	assert.Equal(t, []string{"a1", "b1"}, infoIDs(export(t, b, l2, 2)))
	assert.Equal(t, int64(5), stats(t, b).Pending)

	// The export is the caller's.
	got[0].Payload[0] = 'X'
	assert.Equal(t, []byte("a1"), export(t, b, l2, 1)[0].Payload)

	// Fenced.
	_, err := b.ExportBatch(ctx, l, 10)
	require.ErrorIs(t, err, outbox.ErrLeaseLost)
	_, err = b.ExportBatch(ctx, l2, 0)
	require.ErrorIs(t, err, outbox.ErrInvalidArgument)
}

func TestRemoveExported(t *testing.T) {
	ctx := context.Background()
	b, c := newBackend(t, 2)
	k0, k1 := keyIn(0, 2), keyIn(1, 2)
	appendAll(t, b, e("x1", k0), e("x2", k0), e("x3", k0), e("y1", k1))
	l := acquire(t, b, 0, "r")
	require.Len(t, fetch(t, b, l, 3), 3)
	require.NoError(t, b.MarkFailed(ctx, l, []outbox.Failure{{ID: "x1", Error: "p", Park: true}, {ID: "x2", Error: "r", Delay: time.Hour}}))

	// Stale lease: refused, nothing removed.
	c.Advance(ttl + time.Second)
	l2 := acquire(t, b, 0, "mover")
	require.ErrorIs(t, b.RemoveExported(ctx, l, []string{"x1"}), outbox.ErrLeaseLost)
	require.Len(t, export(t, b, l2, 10), 3)

	// Removes every state; ignores unknown IDs and those of another
	// partition; idempotent.
	require.NoError(t, b.RemoveExported(ctx, l2, []string{"x1", "x2", "unknown", "y1"}))
	require.NoError(t, b.RemoveExported(ctx, l2, []string{"x1", "x2"}))
	assert.Equal(t, []string{"x3"}, infoIDs(export(t, b, l2, 10)))
	_, err := b.Lookup(ctx, "x1")
	require.ErrorIs(t, err, outbox.ErrNotFound)
	_, err = b.Lookup(ctx, "y1")
	require.NoError(t, err)
	assert.Equal(t, outbox.Stats{Pending: 2, Due: 2, OldestDue: c.Now().Add(-ttl - time.Second)}, stats(t, b))
	// x3 is no longer held back by x2, which is gone.
	assert.Equal(t, []string{"x3"}, idsOf(fetch(t, b, l2, 10)))
	require.NoError(t, b.RemoveExported(ctx, l, nil), "an empty ids does nothing")
}

func TestImportComesBeforeAppended(t *testing.T) {
	ctx := context.Background()
	b, c := newBackend(t, 4)
	require.NoError(t, b.Hold(ctx, "moving"))
	since := c.Now()
	c.Advance(time.Second)
	k := keyIn(3, 4)
	appendAll(t, b, e("new1", k), e("other", keyIn(1, 4)))
	c.Advance(time.Second)
	// Due by the source's clock, which is ahead of this one: lowered to
	// since. The retrying entry keeps its due time and holds back new1.
	old1 := info("old1", k, c.Now().Add(-time.Millisecond))
	old1.Partition = 0 // ignored
	sched := info("sched", k, c.Now().Add(time.Hour))
	n := importAll(t, b, old1, sched)
	assert.Equal(t, 2, n)
	got, err := b.Lookup(ctx, "old1")
	require.NoError(t, err)
	assert.Equal(t, 3, got.Partition)
	assert.Equal(t, since, got.DueAt)
	assert.Equal(t, old1.CreatedAt, got.CreatedAt)
	got, err = b.Lookup(ctx, "sched")
	require.NoError(t, err)
	assert.Equal(t, sched.DueAt, got.DueAt)

	hs, err := b.HoldState(ctx)
	require.NoError(t, err)
	assert.Equal(t, outbox.HoldState{Held: true, Reason: "moving", Since: since}, hs)
	l := acquire(t, b, 3, "r")
	assert.Empty(t, fetch(t, b, l, 10), "held")
	require.NoError(t, b.Unhold(ctx))
	assert.Equal(t, []string{"old1", "new1"}, idsOf(fetch(t, b, l, 10)))

	// Idempotent by ID, imported or appended; first of a call wins.
	assert.Equal(t, 0, importAll(t, b, old1, info("new1", k, c.Now())))
	assert.Equal(t, 1, importAll(t, b, info("dup", "", c.Now()), info("dup", "z", c.Now())))
	got, err = b.Lookup(ctx, "dup")
	require.NoError(t, err)
	assert.Empty(t, got.Key)
}

func TestImportedRetryingEntryHoldsBackItsKey(t *testing.T) {
	ctx := context.Background()
	b, c := newBackend(t, 1)
	appendAll(t, b, e("new1", "k"), e("free", "j"))
	retry := info("old1", "k", c.Now().Add(time.Minute))
	retry.Attempts, retry.LastError = 2, "boom"
	parked := info("dead", "k", time.Time{})
	parked.Topic, parked.Parked, parked.Attempts = "", true, 1
	assert.Equal(t, 2, importAll(t, b, parked, retry))
	l := acquire(t, b, 0, "r")
	assert.Equal(t, []string{"free"}, idsOf(fetch(t, b, l, 10)), "old1 holds back new1; the parked entry holds nothing back")
	c.Advance(time.Minute)
	batch := fetch(t, b, l, 10)
	require.Equal(t, []string{"old1"}, idsOf(batch))
	assert.Equal(t, 2, batch[0].Attempts)
	require.NoError(t, b.MarkSent(ctx, l, []string{"old1"}))
	assert.Equal(t, []string{"new1"}, idsOf(fetch(t, b, l, 10)))

	p, err := b.Lookup(ctx, "dead")
	require.NoError(t, err)
	assert.True(t, p.Parked)
	assert.Equal(t, int64(1), stats(t, b).Parked)
	n, err := b.Requeue(ctx, "dead")
	assert.Equal(t, 0, n)
	require.ErrorIs(t, err, outbox.ErrNotRequeueable, "an entry without a topic stays parked")
}

func TestImportRejectsInvalidEntries(t *testing.T) {
	b, c := newBackend(t, 1)
	ok := info("ok", "k", c.Now())
	for name, bad := range map[string]func(*outbox.EntryInfo){
		"empty ID":          func(in *outbox.EntryInfo) { in.ID = "" },
		"long ID":           func(in *outbox.EntryInfo) { in.ID = strings.Repeat("i", outbox.MaxIDLen+1) },
		"empty topic":       func(in *outbox.EntryInfo) { in.Topic = "" },
		"long topic":        func(in *outbox.EntryInfo) { in.Topic = strings.Repeat("t", outbox.MaxTopicLen+1) },
		"long parked topic": func(in *outbox.EntryInfo) { in.Parked, in.Topic = true, strings.Repeat("t", outbox.MaxTopicLen+1) },
		"long key":          func(in *outbox.EntryInfo) { in.Key = strings.Repeat("k", outbox.MaxKeyLen+1) },
	} {
		t.Run(name, func(t *testing.T) {
			in := info("bad", "k", c.Now())
			bad(&in)
			n, err := b.Import(context.Background(), []outbox.EntryInfo{ok, in})
			require.ErrorIs(t, err, outbox.ErrInvalidEntry)
			assert.Contains(t, err.Error(), "entry 1")
			assert.Zero(t, n)
			assert.Zero(t, stats(t, b).Pending)
		})
	}
	n, err := b.Import(context.Background(), nil)
	require.NoError(t, err)
	assert.Zero(t, n)
}

func TestHoldKeepsSince(t *testing.T) {
	ctx := context.Background()
	b, c := newBackend(t, 1)
	require.NoError(t, b.Unhold(ctx), "unholding an outbox that is not held")
	require.NoError(t, b.Hold(ctx, "first"))
	since := c.Now()
	c.Advance(time.Minute)
	require.NoError(t, b.Hold(ctx, "second"))
	hs, err := b.HoldState(ctx)
	require.NoError(t, err)
	assert.Equal(t, outbox.HoldState{Held: true, Reason: "second", Since: since}, hs)
	appendAll(t, b, e("e1", "k"))
	l := acquire(t, b, 0, "r")
	assert.Empty(t, fetch(t, b, l, 10))
	assert.Equal(t, int64(1), stats(t, b).Due)
	require.NoError(t, b.Unhold(ctx))
	hs, err = b.HoldState(ctx)
	require.NoError(t, err)
	assert.Equal(t, outbox.HoldState{}, hs)
	assert.Equal(t, []string{"e1"}, idsOf(fetch(t, b, l, 10)))
}

func TestSeal(t *testing.T) {
	ctx := context.Background()
	b, _ := newBackend(t, 1)
	open := b.Begin()
	require.NoError(t, b.AppendInTx(ctx, open, e("open", "k")))
	appendAll(t, b, e("before", "k"))
	require.NoError(t, b.Seal(ctx))
	require.NoError(t, b.Seal(ctx), "sealing a sealed outbox")
	sealed, err := b.Sealed(ctx)
	require.NoError(t, err)
	assert.True(t, sealed)

	require.ErrorIs(t, open.Commit(), outbox.ErrSealed, "a tx open at Seal fails at commit")
	require.ErrorIs(t, b.Append(ctx, e("after", "k")), outbox.ErrSealed)
	require.NoError(t, b.AppendInTx(ctx, b.Begin()), "no entries is still a no-op")
	_, err = b.Lookup(ctx, "open")
	require.ErrorIs(t, err, outbox.ErrNotFound)

	// Entries already there are delivered.
	l := acquire(t, b, 0, "r")
	assert.Equal(t, []string{"before"}, idsOf(fetch(t, b, l, 10)))
	require.NoError(t, b.MarkSent(ctx, l, []string{"before"}))

	require.NoError(t, b.Unseal(ctx))
	require.NoError(t, b.Unseal(ctx))
	appendAll(t, b, e("after", "k"))
	assert.Equal(t, []string{"after"}, idsOf(fetch(t, b, l, 10)))
}

// TestSealRacesCommits seals while transactions commit: every commit that
// returned nil is visible, every other failed with ErrSealed, and after
// Seal returned no commit succeeds.
func TestSealRacesCommits(t *testing.T) {
	ctx := context.Background()
	b := memory.New(memory.Options{})
	defer b.Close()
	var (
		wg        sync.WaitGroup
		mu        sync.Mutex
		committed []string
		sealedAt  = make(chan struct{})
	)
	for g := range 4 {
		wg.Go(func() {
			for i := 0; ; i++ {
				id := fmt.Sprintf("g%d-%d", g, i)
				select {
				case <-sealedAt:
					assert.ErrorIs(t, b.Append(ctx, e(id, "")), outbox.ErrSealed, "an append after Seal returned")
					return
				default:
				}
				err := b.Append(ctx, e(id, ""))
				if errors.Is(err, outbox.ErrSealed) {
					continue
				}
				if !assert.NoError(t, err) {
					return
				}
				mu.Lock()
				committed = append(committed, id)
				mu.Unlock()
			}
		})
	}
	for {
		mu.Lock()
		n := len(committed)
		mu.Unlock()
		if n >= 100 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	require.NoError(t, b.Seal(ctx))
	close(sealedAt)
	wg.Wait()
	for _, id := range committed {
		_, err := b.Lookup(ctx, id)
		require.NoError(t, err, "a commit that returned nil")
	}
	s := stats(t, b)
	assert.Equal(t, int64(len(committed)), s.Pending)
}

func TestMoveAfterClose(t *testing.T) {
	ctx := context.Background()
	b := memory.New(memory.Options{})
	l, err := b.AcquireLease(ctx, 0, "r", time.Hour)
	require.NoError(t, err)
	require.NoError(t, b.Close())
	_, err = b.ExportBatch(ctx, l, 1)
	assert.ErrorIs(t, err, outbox.ErrClosed)
	assert.ErrorIs(t, b.RemoveExported(ctx, l, nil), outbox.ErrClosed)
	_, err = b.Import(ctx, nil)
	assert.ErrorIs(t, err, outbox.ErrClosed)
	assert.ErrorIs(t, b.Hold(ctx, "x"), outbox.ErrClosed)
	assert.ErrorIs(t, b.Unhold(ctx), outbox.ErrClosed)
	_, err = b.HoldState(ctx)
	assert.ErrorIs(t, err, outbox.ErrClosed)
	assert.ErrorIs(t, b.Seal(ctx), outbox.ErrClosed)
	assert.ErrorIs(t, b.Unseal(ctx), outbox.ErrClosed)
	_, err = b.Sealed(ctx)
	assert.ErrorIs(t, err, outbox.ErrClosed)
}

func TestImportKeepsKeySequenceHeaders(t *testing.T) {
	ctx := context.Background()
	b := memory.New(memory.Options{KeySequence: true})
	defer b.Close()
	in := info("old", "k", time.Now().Add(-time.Hour))
	in.Headers = map[string]string{outbox.HeaderKeySeq: "41"}
	importAll(t, b, in, info("bare", "k", time.Now().Add(-time.Hour)))
	require.NoError(t, b.Append(ctx, e("new", "k")))
	for id, want := range map[string]string{"old": "41", "bare": "", "new": "1"} {
		got, err := b.Lookup(ctx, id)
		require.NoError(t, err)
		assert.Equal(t, want, got.Headers[outbox.HeaderKeySeq], id)
	}
}
