package redisoutbox

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/outboxrelay/outbox"
)

// TestMove pins what the Redis backend adds to the conformance cases of
// Exporter, Importer, Holder and Sealer: on a single node and on Cluster.
func TestMove(t *testing.T) {
	t.Parallel()
	for _, tg := range targets {
		t.Run(tg.name, func(t *testing.T) {
			t.Parallel()
			c := tg.client(t)
			for _, tc := range []struct {
				name string
				run  func(*testing.T, redis.UniversalClient)
			}{
				{"MoveKeysShareTheirPartitionSlot", testMoveKeysSlot},
				{"SealRacingAppendsNoAppendCommitsAfterSeal", testSealRace},
				{"SealedAppendErrorNamesOutboxAndFix", testSealedError},
				{"PartlySealedIsAnError", testPartlySealed},
				{"HeldImportSortsBeforeAppendsSinceHold", testHeldImportOrder},
				{"ImportedRetryingHoldsBackAndDueComesFirst", testImportOrdering},
				{"ExportQuarantinedAndUndecodableAsParked", testExportCorrupt},
				{"ExportPagesInAppendOrderAfterRemove", testExportPages},
				{"ImportAcrossPartitionsRetriedFinishes", testImportRetry},
				{"HoldStateOfAPartialHold", testPartialHold},
				{"StatsOfHeldBackImportedEntries", testImportedStats},
			} {
				t.Run(tc.name, func(t *testing.T) { t.Parallel(); tc.run(t, c) })
			}
		})
	}
}

func infoIDs(infos []outbox.EntryInfo) []string {
	out := make([]string, len(infos))
	for i, info := range infos {
		out[i] = info.ID
	}
	return out
}

func imported(id, key string, due time.Time) outbox.EntryInfo {
	return outbox.EntryInfo{Entry: outbox.Entry{ID: id, Topic: "t", Key: key, Payload: []byte(id),
		CreatedAt: time.Now().Add(-time.Hour).Truncate(time.Microsecond)}, DueAt: due}
}

// testMoveKeysSlot: the hold hash, the sealed flag and the export scratch
// key are in their partition's slot, so every script stays in one slot.
func testMoveKeysSlot(t *testing.T, c redis.UniversalClient) {
	ctx := testCtx(t)
	b := newBackend(t, c, Options{Partitions: 8})
	for _, k := range b.parts {
		s, err := c.ClusterKeySlot(ctx, k.entries).Result()
		if err != nil {
			t.Skip("a single node: no slots")
		}
		for _, key := range []string{k.hold, k.sealed, k.export, k.seq, k.keyorder, k.parked} {
			got, err := c.ClusterKeySlot(ctx, key).Result()
			require.NoError(t, err)
			require.Equal(t, s, got, key)
		}
	}
}

// testSealRace appends from many MULTI/EXEC transactions (each with a
// business write) while Seal runs: every append whose EXEC succeeded is
// in the outbox, every refused one wraps ErrSealed (as an ExecError: the
// business write was applied) and left no entry, and no EXEC that started
// after Seal returned succeeded.
func testSealRace(t *testing.T, c redis.UniversalClient) {
	ctx := testCtx(t)
	b := newBackend(t, c, Options{Partitions: 4, NoNotify: true})
	var sealedAt atomic.Int64 // UnixNano when Seal returned; 0 before
	var mu sync.Mutex
	ok, refused := map[string]bool{}, map[string]bool{}
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			for i := 0; ; i++ {
				e := outbox.Entry{ID: fmt.Sprintf("w%d-%d", w, i), Topic: "t", Key: fmt.Sprint("k", i%5)}
				started := time.Now().UnixNano()
				err := CheckExec(c.TxPipelined(ctx, func(pipe redis.Pipeliner) error {
					pipe.Set(ctx, b.HashTag(e.Key)+":business", e.ID, time.Minute)
					return b.AppendInTx(ctx, pipe, e)
				}))
				s := sealedAt.Load()
				mu.Lock()
				switch {
				case err == nil:
					ok[e.ID] = true
					if s != 0 && started > s {
						t.Errorf("append %s started after Seal returned and committed", e.ID)
					}
				case errors.Is(err, outbox.ErrSealed):
					refused[e.ID] = true
					var ee *ExecError
					if !errors.As(err, &ee) {
						t.Errorf("refused append %s: %v is not an *ExecError", e.ID, err)
					}
				default:
					t.Errorf("append %s: %v", e.ID, err)
				}
				mu.Unlock()
				if err != nil || t.Failed() || s != 0 && i > 1000 {
					return
				}
			}
		})
	}
	time.Sleep(50 * time.Millisecond)
	require.NoError(t, b.Seal(ctx))
	sealedAt.Store(time.Now().UnixNano())
	wg.Wait()
	for _, k := range b.parts {
		c.Del(ctx, k.tag+":business")
	}
	require.NotEmpty(t, ok)
	require.Len(t, refused, 8, "every worker ends on a refused append")
	got := map[string]bool{}
	for _, e := range drainPartitions(ctx, t, b) {
		got[e.ID] = true
	}
	assert.Equal(t, ok, got, "the outbox holds exactly the appends that committed")
}

// testSealedError: Append and CheckExec name the outbox and the fix.
func testSealedError(t *testing.T, c redis.UniversalClient) {
	ctx := testCtx(t)
	b := newBackend(t, c, Options{KeySequence: true})
	require.NoError(t, b.Seal(ctx))
	err := b.Append(ctx, outbox.Entry{Topic: "t", Key: "k"})
	require.ErrorIs(t, err, outbox.ErrSealed)
	var se *SealedError
	require.ErrorAs(t, err, &se)
	assert.Equal(t, b.opts.Prefix, se.Prefix)
	err = CheckExec(c.TxPipelined(ctx, func(pipe redis.Pipeliner) error {
		return b.AppendInTx(ctx, pipe, outbox.Entry{ID: "x", Topic: "t", Key: "k"})
	}))
	require.ErrorIs(t, err, outbox.ErrSealed)
	require.ErrorAs(t, err, &se)
	assert.Equal(t, b.opts.Prefix, se.Prefix)
	assert.Contains(t, err.Error(), fmt.Sprintf("prefix %q is sealed", b.opts.Prefix))
	assert.Contains(t, err.Error(), "append to the destination outbox")
	assert.Contains(t, err.Error(), "Redis applied every other queued command")
	require.NoError(t, b.Unseal(ctx))
	require.NoError(t, b.Append(ctx, outbox.Entry{Topic: "t", Key: "k"}))
}

// testPartlySealed: a seal flag missing on one partition (a Seal that
// failed part way) makes Sealed fail, naming the partitions sealed.
func testPartlySealed(t *testing.T, c redis.UniversalClient) {
	ctx := testCtx(t)
	b := newBackend(t, c, Options{Partitions: 3})
	require.NoError(t, b.Seal(ctx))
	require.NoError(t, c.Del(ctx, b.parts[1].sealed).Err())
	sealed, err := b.Sealed(ctx)
	require.Error(t, err)
	assert.False(t, sealed)
	assert.Contains(t, err.Error(), "partitions [0 2] of 3")
	require.NoError(t, b.Seal(ctx))
	sealed, err = b.Sealed(ctx)
	require.NoError(t, err)
	assert.True(t, sealed)
}

// testHeldImportOrder: entries imported while the outbox is held take
// sequences below those appended since the hold, so the export of the
// destination (a move of the destination before it drained) keeps them
// ahead; and a fetch after Unhold hands them out first.
func testHeldImportOrder(t *testing.T, c redis.UniversalClient) {
	ctx := testCtx(t)
	b := newBackend(t, c, Options{})
	require.NoError(t, b.Hold(ctx, "move"))
	require.NoError(t, b.Append(ctx, outbox.Entry{ID: "app1", Topic: "t", Key: "k"}, outbox.Entry{ID: "app2", Topic: "t", Key: "j"}))
	n, err := b.Import(ctx, []outbox.EntryInfo{imported("imp1", "k", time.Now()), imported("imp2", "j", time.Now().Add(10*time.Second))})
	require.NoError(t, err)
	require.Equal(t, 2, n)
	l, err := b.AcquireLease(ctx, 0, "mover", time.Minute)
	require.NoError(t, err)
	got, err := b.ExportBatch(ctx, l, 10)
	require.NoError(t, err)
	assert.Equal(t, []string{"imp1", "imp2", "app1", "app2"}, infoIDs(got))
	es, err := b.FindPendingBatch(ctx, l, 10)
	require.NoError(t, err)
	assert.Empty(t, es, "held")
	require.NoError(t, b.Unhold(ctx))
	es, err = b.FindPendingBatch(ctx, l, 10)
	require.NoError(t, err)
	// imp2 was never attempted and has no NotBefore: due at its source,
	// 10 s ahead of this clock (skew), so it is lowered like imp1.
	assert.Equal(t, []string{"imp1", "imp2", "app1", "app2"}, ids(es))
	// A second hold reserves a new block above everything appended.
	require.NoError(t, b.Hold(ctx, "again"))
	require.NoError(t, b.Append(ctx, outbox.Entry{ID: "app3", Topic: "t", Key: "k"}))
	_, err = b.Import(ctx, []outbox.EntryInfo{imported("imp3", "k", time.Now())})
	require.NoError(t, err)
	got, err = b.ExportBatch(ctx, l, 10)
	require.NoError(t, err)
	assert.Equal(t, []string{"imp1", "imp2", "app1", "app2", "imp3", "app3"}, infoIDs(got))
}

// testImportOrdering: an imported entry that was attempted holds back
// the appended entries of its key even when it is due after them and was
// imported after them; an imported scheduled entry holds nothing back.
func testImportOrdering(t *testing.T, c redis.UniversalClient) {
	ctx := testCtx(t)
	b := newBackend(t, c, Options{})
	require.NoError(t, b.Append(ctx, outbox.Entry{ID: "app-k", Topic: "t", Key: "k"}, outbox.Entry{ID: "app-s", Topic: "t", Key: "s"}))
	retry := imported("imp-k", "k", time.Now().Add(300*time.Millisecond))
	retry.Attempts, retry.LastError = 2, "down"
	sched := imported("imp-s", "s", time.Now().Add(time.Hour))
	sched.NotBefore = sched.DueAt
	n, err := b.Import(ctx, []outbox.EntryInfo{retry, sched})
	require.NoError(t, err)
	require.Equal(t, 2, n)
	l, err := b.AcquireLease(ctx, 0, "relay", time.Minute)
	require.NoError(t, err)
	es, err := b.FindPendingBatch(ctx, l, 10)
	require.NoError(t, err)
	assert.Equal(t, []string{"app-s"}, ids(es), "app-k is held back by imp-k; imp-s is scheduled and holds nothing back")
	require.NoError(t, b.MarkSent(ctx, l, ids(es)))
	require.Eventually(t, func() bool {
		es, err = b.FindPendingBatch(ctx, l, 10)
		require.NoError(t, err)
		return len(es) > 0
	}, 5*time.Second, 20*time.Millisecond)
	assert.Equal(t, []string{"imp-k"}, ids(es), "a retrying entry is handed out alone")
	assert.Equal(t, 2, es[0].Attempts)
	require.NoError(t, b.MarkSent(ctx, l, ids(es)))
	es, err = b.FindPendingBatch(ctx, l, 10)
	require.NoError(t, err)
	assert.Equal(t, []string{"app-k"}, ids(es))
	n, err = b.Import(ctx, []outbox.EntryInfo{retry})
	require.NoError(t, err)
	assert.Equal(t, 1, n, "imp-k was sent, so importing it again adds it again")
}

// testExportCorrupt: a quarantined value (parked by the claim) and a
// pending value that does not decode are exported as parked entries with
// the raw value as payload, in append order.
func testExportCorrupt(t *testing.T, c redis.UniversalClient) {
	ctx := testCtx(t)
	b := newBackend(t, c, Options{})
	h := map[string]string{"h": "v"}
	require.NoError(t, b.Append(ctx,
		outbox.Entry{ID: "q", Topic: "t", Key: "k", Headers: h},
		outbox.Entry{ID: "ok", Topic: "t", Key: "j"},
		outbox.Entry{ID: "bad", Topic: "t", Key: "k", Headers: h}))
	require.NoError(t, corrupt(ctx, c, b, "q", "truncated value"))
	l, err := b.AcquireLease(ctx, 0, "relay", time.Minute)
	require.NoError(t, err)
	batch, err := b.FetchBatch(ctx, l, 1)
	require.NoError(t, err)
	require.Len(t, batch.Parked, 1, "q is quarantined")
	require.NoError(t, corrupt(ctx, c, b, "bad", "header count past the end"))
	got, err := b.ExportBatch(ctx, l, 10)
	require.NoError(t, err)
	require.Equal(t, []string{"q", "ok", "bad"}, infoIDs(got))
	assert.True(t, got[0].Parked)
	assert.Contains(t, got[0].LastError, "truncated last error length")
	assert.False(t, got[1].Parked)
	assert.True(t, got[2].Parked)
	assert.Equal(t, "k", got[2].Key)
	assert.Contains(t, got[2].LastError, "header count larger than the value")
	raw, err := c.HGet(ctx, b.parts[0].entries, "bad").Bytes()
	require.NoError(t, err)
	assert.Equal(t, raw, got[2].Payload)
	n, err := b.Import(ctx, nil)
	require.NoError(t, err)
	assert.Zero(t, n)
	require.NoError(t, b.RemoveExported(ctx, l, infoIDs(got)))
	got, err = b.ExportBatch(ctx, l, 10)
	require.NoError(t, err)
	assert.Empty(t, got)
	for _, key := range []string{b.parts[0].pending, b.parts[0].parked, b.parts[0].keyorder, b.parts[0].entries, b.parts[0].export} {
		n, err := c.Exists(ctx, key).Result()
		require.NoError(t, err)
		assert.Zero(t, n, "%s is empty after removing everything", key)
	}
}

// testExportPages: pages of an export after RemoveExported continue in
// append order, across retries, parks and requeues; the scratch key is
// gone after each call.
func testExportPages(t *testing.T, c redis.UniversalClient) {
	ctx := testCtx(t)
	b := newBackend(t, c, Options{})
	var want []string
	var es []outbox.Entry
	for i := range 60 {
		id := fmt.Sprintf("e%02d", i)
		want = append(want, id)
		es = append(es, outbox.Entry{ID: id, Topic: "t", Key: fmt.Sprint("k", i%7)})
	}
	require.NoError(t, b.Append(ctx, es...))
	l, err := b.AcquireLease(ctx, 0, "relay", time.Minute)
	require.NoError(t, err)
	got, err := b.FindPendingBatch(ctx, l, 10)
	require.NoError(t, err)
	require.NoError(t, b.MarkFailed(ctx, l, []outbox.Failure{{ID: got[0].ID, Delay: time.Hour, Error: "x"}, {ID: got[1].ID, Park: true, Error: "y"}, {ID: got[2].ID, Park: true, Error: "z"}}))
	n, err := b.Requeue(ctx, got[2].ID) // now appended last
	require.NoError(t, err)
	require.Equal(t, 1, n)
	want = append(slices.Delete(want, 2, 3), got[2].ID)
	var exported []string
	for {
		page, err := b.ExportBatch(ctx, l, 7)
		require.NoError(t, err)
		require.LessOrEqual(t, len(page), 7)
		if len(page) == 0 {
			break
		}
		exported = append(exported, infoIDs(page)...)
		require.NoError(t, b.RemoveExported(ctx, l, infoIDs(page)))
		n, err := c.Exists(ctx, b.parts[0].export).Result()
		require.NoError(t, err)
		require.Zero(t, n)
	}
	assert.Equal(t, want, exported)
}

// testImportRetry: an import spanning partitions whose script failed in
// one partition (a wrong-typed key) keeps what the others added; once the
// key is fixed, the same call again adds the rest and counts only them.
// The failed call counts what the other partitions added.
func testImportRetry(t *testing.T, c redis.UniversalClient) {
	ctx := testCtx(t)
	b := newBackend(t, c, Options{Partitions: 4})
	var all []outbox.EntryInfo
	for i := range 40 {
		all = append(all, imported(fmt.Sprint("i", i), fmt.Sprint("key", i), time.Now()))
	}
	bad := b.parts[outbox.PartitionOf("key0", 4)].pending
	require.NoError(t, c.Set(ctx, bad, "not a zset", 0).Err())
	n, err := b.Import(ctx, all)
	require.Error(t, err)
	assert.Contains(t, err.Error(), bad)
	assert.Less(t, n, 40)
	require.NoError(t, c.Del(ctx, bad).Err())
	n2, err := b.Import(ctx, all)
	require.NoError(t, err)
	assert.Positive(t, n2)
	// The failed call counted what the other partitions added.
	assert.Equal(t, 40, n+n2, "entries counted by the failed call (%d) and the retry (%d)", n, n2)
	n3, err := b.Import(ctx, all)
	require.NoError(t, err)
	assert.Zero(t, n3)
	assert.Len(t, drainPartitions(ctx, t, b), 40)
}

// testPartialHold: a hold whose meta record is gone (an Unhold that
// failed part way) is still reported held, since the partitions are.
func testPartialHold(t *testing.T, c redis.UniversalClient) {
	ctx := testCtx(t)
	b := newBackend(t, c, Options{Partitions: 3})
	require.NoError(t, b.Hold(ctx, "r"))
	first, err := b.HoldState(ctx)
	require.NoError(t, err)
	require.NoError(t, c.HDel(ctx, b.meta, "hold-since", "hold-reason").Err())
	hs, err := b.HoldState(ctx)
	require.NoError(t, err)
	assert.True(t, hs.Held)
	assert.Equal(t, first.Since, hs.Since)
	assert.Empty(t, hs.Reason)
	require.NoError(t, b.Unhold(ctx))
	hs, err = b.HoldState(ctx)
	require.NoError(t, err)
	assert.Equal(t, outbox.HoldState{}, hs)
	for _, k := range b.parts {
		n, err := c.Exists(ctx, k.hold).Result()
		require.NoError(t, err)
		assert.Zero(t, n)
	}
}

// testImportedStats: an imported entry held back behind a failing one and
// re-scored to its retry time counts as due, with its created-at as its
// due time (its position is 0), not the epoch.
func testImportedStats(t *testing.T, c redis.UniversalClient) {
	ctx := testCtx(t)
	b := newBackend(t, c, Options{})
	retry := imported("r", "k", time.Now().Add(-time.Minute))
	retry.Attempts = 1
	due := imported("d", "k", time.Now().Add(-time.Minute))
	_, err := b.Import(ctx, []outbox.EntryInfo{retry, due})
	require.NoError(t, err)
	l, err := b.AcquireLease(ctx, 0, "relay", time.Minute)
	require.NoError(t, err)
	es, err := b.FindPendingBatch(ctx, l, 10)
	require.NoError(t, err)
	require.Equal(t, []string{"r"}, ids(es))
	require.NoError(t, b.MarkFailed(ctx, l, []outbox.Failure{{ID: "r", Delay: time.Hour, Error: "x"}}))
	es, err = b.FindPendingBatch(ctx, l, 10) // re-scores d behind r
	require.NoError(t, err)
	require.Empty(t, es)
	st, err := b.Stats(ctx)
	require.NoError(t, err)
	assert.Equal(t, int64(1), st.Due)
	assert.WithinDuration(t, due.CreatedAt, st.OldestDue, time.Millisecond)
	got, err := b.ExportBatch(ctx, l, 10)
	require.NoError(t, err)
	require.Equal(t, []string{"r", "d"}, infoIDs(got))
	assert.WithinDuration(t, due.CreatedAt, got[1].DueAt, time.Millisecond, "d, held back, is exported due (since its created-at), not at r's retry time")
	assert.Equal(t, 2, got[0].Attempts)
}
