package redisoutbox

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/outboxrelay/outbox"
	"github.com/outboxrelay/outbox/conformance"
	"github.com/outboxrelay/outbox/internal/keyseqtest"
)

func TestKeySequence(t *testing.T) {
	t.Parallel()
	for _, tg := range targets {
		t.Run(tg.name, func(t *testing.T) {
			t.Parallel()
			c := tg.client(t)
			t.Run("NumbersEachKeyFromOne", func(t *testing.T) { t.Parallel(); testKeySeqNumbers(t, c) })
			t.Run("DiscardLeavesNoGap", func(t *testing.T) { t.Parallel(); testKeySeqDiscard(t, c) })
			t.Run("IdempotentReappendTakesNoNumber", func(t *testing.T) { t.Parallel(); testKeySeqIdempotent(t, c) })
			t.Run("CallerSetHeaderIsRefused", func(t *testing.T) { t.Parallel(); testKeySeqRefused(t, c) })
			t.Run("OffLeavesHeadersAlone", func(t *testing.T) { t.Parallel(); testKeySeqOff(t, c) })
			t.Run("RequeueAndRetryKeepTheNumber", func(t *testing.T) { t.Parallel(); testKeySeqRequeue(t, c) })
			t.Run("FailedCommandInExecKeepsNumbers", func(t *testing.T) { t.Parallel(); testKeySeqPartialExec(t, c) })
			t.Run("ConcurrentAppenders", func(t *testing.T) { t.Parallel(); testKeySeqConcurrent(t, c) })
		})
	}
}

// appendTx appends es in one MULTI/EXEC with a business write in the
// partition's slot (all of es must share a partition).
func appendTx(ctx context.Context, t *testing.T, c redis.UniversalClient, b *Backend, es ...outbox.Entry) {
	t.Helper()
	_, err := c.TxPipelined(ctx, func(pipe redis.Pipeliner) error {
		pipe.Set(ctx, b.HashTag(es[0].Key)+":business", "x", time.Minute)
		return b.AppendInTx(ctx, pipe, es...)
	})
	require.NoError(t, err)
	t.Cleanup(func() { c.Del(context.Background(), b.HashTag(es[0].Key)+":business") })
}

// drainPartitions fetches and marks sent every entry of every partition,
// in fetch order.
func drainPartitions(ctx context.Context, t *testing.T, b *Backend) []outbox.Entry {
	t.Helper()
	var all []outbox.Entry
	for p := range b.Partitions() {
		l, err := b.AcquireLease(ctx, p, "keyseq", time.Minute)
		require.NoError(t, err)
		for {
			got, err := b.FindPendingBatch(ctx, l, 100)
			require.NoError(t, err)
			if len(got) == 0 {
				break
			}
			require.NoError(t, b.MarkSent(ctx, l, ids(got)))
			all = append(all, got...)
		}
	}
	return all
}

func keySeqs(es []outbox.Entry) map[string]string {
	m := map[string]string{}
	for _, e := range es {
		m[e.ID] = e.Headers[outbox.HeaderKeySeq]
	}
	return m
}

func testKeySeqNumbers(t *testing.T, c redis.UniversalClient) {
	ctx := testCtx(t)
	b := newBackend(t, c, Options{KeySequence: true, NoNotify: true})
	appendTx(ctx, t, c, b, outbox.Entry{ID: "a1", Topic: "t", Key: "a", Headers: map[string]string{"h": "v"}, Payload: []byte("p\x00")})
	appendTx(ctx, t, c, b,
		outbox.Entry{ID: "b1", Topic: "t", Key: "b"},
		outbox.Entry{ID: "a2", Topic: "t", Key: "a"},
		outbox.Entry{ID: "n1", Topic: "t"},
		outbox.Entry{ID: "b2", Topic: "t", Key: "b", Headers: map[string]string{"z": "last"}},
		outbox.Entry{ID: "a3", Topic: "t", Key: "a"})
	require.NoError(t, b.Append(ctx, outbox.Entry{ID: "a4", Topic: "t", Key: "a"}, outbox.Entry{ID: "n2", Topic: "t"}))

	info, err := b.Lookup(ctx, "a3")
	require.NoError(t, err)
	assert.Equal(t, "3", info.Headers[outbox.HeaderKeySeq], "Lookup shows the header")

	got := drainPartitions(ctx, t, b)
	assert.Equal(t, map[string]string{"a1": "1", "a2": "2", "a3": "3", "a4": "4", "b1": "1", "b2": "2", "n1": "", "n2": ""}, keySeqs(got))
	for _, e := range got {
		switch e.ID {
		case "a1":
			assert.Equal(t, map[string]string{"h": "v", outbox.HeaderKeySeq: "1"}, e.Headers, "the caller's headers are kept")
			assert.Equal(t, []byte("p\x00"), e.Payload)
		case "b2":
			assert.Equal(t, map[string]string{"z": "last", outbox.HeaderKeySeq: "2"}, e.Headers)
		case "n1", "n2":
			assert.Nil(t, e.Headers, "an entry without a key gets no number")
		}
	}
	appendTx(ctx, t, c, b, outbox.Entry{ID: "a5", Topic: "t", Key: "a"})
	assert.Equal(t, map[string]string{"a5": "5"}, keySeqs(drainPartitions(ctx, t, b)), "sent entries are deleted; the key counts on")
}

func testKeySeqDiscard(t *testing.T, c redis.UniversalClient) {
	ctx := testCtx(t)
	b := newBackend(t, c, Options{KeySequence: true, NoNotify: true})
	appendTx(ctx, t, c, b, outbox.Entry{ID: "x1", Topic: "t", Key: "k"})
	// Discarded.
	pipe := c.TxPipeline()
	require.NoError(t, b.AppendInTx(ctx, pipe, outbox.Entry{ID: "gone1", Topic: "t", Key: "k"}))
	pipe.Discard()
	// Refused when queued (wrong arity): EXECABORT, nothing runs.
	_, err := c.TxPipelined(ctx, func(pipe redis.Pipeliner) error {
		pipe.Do(ctx, "SET", b.HashTag("k")+":business")
		return b.AppendInTx(ctx, pipe, outbox.Entry{ID: "gone2", Topic: "t", Key: "k"})
	})
	require.Error(t, err)
	// A WATCH conflict: the transaction does not run.
	watched := b.HashTag("k") + ":watched"
	t.Cleanup(func() { c.Del(context.Background(), watched) })
	err = c.Watch(ctx, func(tx *redis.Tx) error {
		require.NoError(t, c.Set(ctx, watched, "changed", time.Minute).Err())
		_, err := tx.TxPipelined(ctx, func(pipe redis.Pipeliner) error {
			return b.AppendInTx(ctx, pipe, outbox.Entry{ID: "gone3", Topic: "t", Key: "k"})
		})
		return err
	}, watched)
	require.ErrorIs(t, err, redis.TxFailedErr)
	appendTx(ctx, t, c, b, outbox.Entry{ID: "x2", Topic: "t", Key: "k"})
	assert.Equal(t, map[string]string{"x1": "1", "x2": "2"}, keySeqs(drainPartitions(ctx, t, b)))
}

func testKeySeqIdempotent(t *testing.T, c redis.UniversalClient) {
	ctx := testCtx(t)
	b := newBackend(t, c, Options{KeySequence: true, NoNotify: true})
	appendTx(ctx, t, c, b, outbox.Entry{ID: "e1", Topic: "t", Key: "k"})
	_, err := c.TxPipelined(ctx, func(pipe redis.Pipeliner) error {
		if err := b.AppendInTx(ctx, pipe,
			outbox.Entry{ID: "e1", Topic: "t", Key: "k"},
			outbox.Entry{ID: "e2", Topic: "t", Key: "k"},
			outbox.Entry{ID: "e2", Topic: "t", Key: "k"},
			outbox.Entry{ID: "e3", Topic: "t", Key: "k"}); err != nil {
			return err
		}
		return b.AppendInTx(ctx, pipe, outbox.Entry{ID: "e3", Topic: "t", Key: "k"}, outbox.Entry{ID: "e4", Topic: "t", Key: "k"})
	})
	require.NoError(t, err)
	assert.Equal(t, map[string]string{"e1": "1", "e2": "2", "e3": "3", "e4": "4"}, keySeqs(drainPartitions(ctx, t, b)))
}

func testKeySeqRefused(t *testing.T, c redis.UniversalClient) {
	ctx := testCtx(t)
	b := newBackend(t, c, Options{KeySequence: true, NoNotify: true})
	pipe := c.TxPipeline()
	defer pipe.Discard()
	err := b.AppendInTx(ctx, pipe, outbox.Entry{ID: "ok", Topic: "t", Key: "k"},
		outbox.Entry{ID: "forged", Topic: "t", Key: "k", Headers: map[string]string{outbox.HeaderKeySeq: "7"}})
	require.ErrorIs(t, err, outbox.ErrInvalidEntry)
	assert.ErrorContains(t, err, "forged")
	assert.Zero(t, pipe.Len(), "nothing queued")
	require.ErrorIs(t, b.Append(ctx, outbox.Entry{ID: "forged", Topic: "t", Key: "k", Headers: map[string]string{outbox.HeaderKeySeq: "1"}}), outbox.ErrInvalidEntry)
}

func testKeySeqOff(t *testing.T, c redis.UniversalClient) {
	ctx := testCtx(t)
	b := newBackend(t, c, Options{NoNotify: true})
	appendTx(ctx, t, c, b, outbox.Entry{ID: "a", Topic: "t", Key: "k", Headers: map[string]string{outbox.HeaderKeySeq: "caller's", "h": "v"}},
		outbox.Entry{ID: "b", Topic: "t", Key: "k"})
	got := drainPartitions(ctx, t, b)
	require.Len(t, got, 2)
	assert.Equal(t, map[string]string{outbox.HeaderKeySeq: "caller's", "h": "v"}, got[0].Headers)
	assert.Nil(t, got[1].Headers)
	n, err := c.Exists(ctx, b.parts[0].keyseq).Result()
	require.NoError(t, err)
	assert.Zero(t, n, "no key sequence hash without the option")
}

func testKeySeqRequeue(t *testing.T, c redis.UniversalClient) {
	ctx := testCtx(t)
	b := newBackend(t, c, Options{KeySequence: true, NoNotify: true})
	appendTx(ctx, t, c, b, outbox.Entry{ID: "r1", Topic: "t", Key: "k"}, outbox.Entry{ID: "r2", Topic: "t", Key: "k"})
	l, err := b.AcquireLease(ctx, 0, "keyseq", time.Minute)
	require.NoError(t, err)
	got, err := b.FindPendingBatch(ctx, l, 10)
	require.NoError(t, err)
	require.Len(t, got, 2)
	require.NoError(t, b.MarkFailed(ctx, l, []outbox.Failure{{ID: "r1", Error: "boom", Delay: -time.Second}, {ID: "r2", Error: "boom", Park: true}}))
	n, err := b.Requeue(ctx, "r2")
	require.NoError(t, err)
	require.Equal(t, 1, n)
	assert.Equal(t, map[string]string{"r1": "1", "r2": "2"}, keySeqs(drainPartitions(ctx, t, b)))
}

// testKeySeqPartialExec: Redis has no rollback. A command of the caller's
// EXEC that fails at run time fails alone: the entries are appended with
// their numbers (no gap), although the business write failed.
func testKeySeqPartialExec(t *testing.T, c redis.UniversalClient) {
	ctx := testCtx(t)
	b := newBackend(t, c, Options{KeySequence: true, NoNotify: true})
	list := b.HashTag("k") + ":a-list"
	require.NoError(t, c.RPush(ctx, list, "x").Err())
	t.Cleanup(func() { c.Del(context.Background(), list) })
	err := CheckExec(c.TxPipelined(ctx, func(pipe redis.Pipeliner) error {
		pipe.HSet(ctx, list, "f", "v") // WRONGTYPE at EXEC
		return b.AppendInTx(ctx, pipe, outbox.Entry{ID: "p1", Topic: "t", Key: "k"})
	}))
	var ee *ExecError
	require.ErrorAs(t, err, &ee)
	assert.Equal(t, []string{"p1"}, ee.Appended)
	appendTx(ctx, t, c, b, outbox.Entry{ID: "p2", Topic: "t", Key: "k"})
	assert.Equal(t, map[string]string{"p1": "1", "p2": "2"}, keySeqs(drainPartitions(ctx, t, b)))
}

// testKeySeqConcurrent appends a hot key and a few cold ones over four
// partitions from many transactions at once, a third of them discarded:
// the appended entries of each key carry exactly 1..N, fetched in number
// order, and the key sequence hash is in each partition's slot.
func testKeySeqConcurrent(t *testing.T, c redis.UniversalClient) {
	ctx := testCtx(t)
	b := newBackend(t, c, Options{KeySequence: true, Partitions: 4})
	for _, k := range b.parts {
		s1, err := c.ClusterKeySlot(ctx, k.entries).Result()
		if err != nil {
			break // a single node without cluster support
		}
		s2, err := c.ClusterKeySlot(ctx, k.keyseq).Result()
		require.NoError(t, err)
		require.Equal(t, s1, s2, k.keyseq)
	}
	const workers, perWorker = 8, 40
	var mu sync.Mutex
	committed := map[string]string{}
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(w), 2))
			for i := range perWorker {
				key := "hot"
				if r.IntN(3) == 0 {
					key = fmt.Sprint("cold-", r.IntN(6))
				}
				es := []outbox.Entry{{ID: fmt.Sprintf("w%d-%d-a", w, i), Topic: "t", Key: key}}
				if r.IntN(2) == 0 {
					es = append(es, outbox.Entry{ID: fmt.Sprintf("w%d-%d-b", w, i), Topic: "t", Key: key})
				}
				pipe := c.TxPipeline()
				pipe.Set(ctx, b.HashTag(key)+":business", i, time.Minute)
				if err := b.AppendInTx(ctx, pipe, es...); err != nil {
					t.Error(err)
					return
				}
				if r.IntN(3) == 0 {
					pipe.Discard()
					continue
				}
				if _, err := pipe.Exec(ctx); err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				for _, e := range es {
					committed[e.ID] = e.Key
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	for _, k := range b.parts {
		c.Del(ctx, k.tag+":business")
	}
	got := drainPartitions(ctx, t, b)
	require.Len(t, got, len(committed))
	byKey := map[string][]int64{}
	for _, e := range got {
		require.Equal(t, committed[e.ID], e.Key)
		n, ok := e.KeySeq()
		require.True(t, ok, "entry %s has no number", e.ID)
		byKey[e.Key] = append(byKey[e.Key], n)
	}
	for k, ns := range byKey {
		require.True(t, slices.IsSorted(ns), "key %s fetched out of number order: %v", k, ns)
		for i, n := range ns {
			require.Equal(t, int64(i+1), n, "key %s: numbers %v are not 1..%d", k, ns, len(ns))
		}
	}
	require.NotEmpty(t, byKey["hot"])
}

// keySeqStripped is a Backend with Options.KeySequence whose reads check
// and then drop the key sequence header, so that the conformance suite,
// which compares the headers it gets back with those it appended, runs
// with the option on: the option must change nothing but that header.
type keySeqStripped struct{ *Backend }

// stripKeySeq checks and removes the key sequence header (see
// keyseqtest.Strip).
func stripKeySeq(es []outbox.Entry) error { return keyseqtest.Strip(es, false) }

func (b keySeqStripped) FindPendingBatch(ctx context.Context, l outbox.Lease, limit int) ([]outbox.Entry, error) {
	es, err := b.Backend.FindPendingBatch(ctx, l, limit)
	if err == nil {
		err = stripKeySeq(es)
	}
	return es, err
}

func (b keySeqStripped) FetchBatch(ctx context.Context, l outbox.Lease, limit int) (outbox.Batch, error) {
	batch, err := b.Backend.FetchBatch(ctx, l, limit)
	if err == nil {
		err = stripKeySeq(batch.Entries)
	}
	return batch, err
}

func (b keySeqStripped) Parked(ctx context.Context, after string, limit int) ([]outbox.Entry, error) {
	es, err := b.Backend.Parked(ctx, after, limit)
	if err == nil {
		err = stripKeySeq(es)
	}
	return es, err
}

func (b keySeqStripped) Lookup(ctx context.Context, id string) (outbox.EntryInfo, error) {
	info, err := b.Backend.Lookup(ctx, id)
	if err == nil {
		es := []outbox.Entry{info.Entry}
		err = stripKeySeq(es)
		info.Entry = es[0]
	}
	return info, err
}

type keySeqHarness struct{ *harness }

func (h keySeqHarness) Backend() outbox.Backend[redis.Pipeliner] { return keySeqStripped{h.b} }

func (h keySeqHarness) Reopen(ctx context.Context, partitions int) (outbox.Store, error) {
	s, err := h.harness.Reopen(ctx, partitions)
	if err != nil {
		return nil, err
	}
	return keySeqStripped{s.(*Backend)}, nil
}

// TestConformanceKeySequence runs the conformance suite with
// Options.KeySequence on (the header checked and dropped on reads), on a
// single node and on Cluster.
func TestConformanceKeySequence(t *testing.T) {
	t.Parallel()
	for _, tg := range targets {
		t.Run(tg.name, func(t *testing.T) {
			t.Parallel()
			c := tg.client(t)
			conformance.Run(t, func(t *testing.T, cfg conformance.Config) conformance.Harness[redis.Pipeliner] {
				_, cluster := c.(*redis.ClusterClient)
				return keySeqHarness{&harness{
					b:     newBackend(t, c, Options{Partitions: cfg.Partitions, KeySequence: true}),
					c:     c,
					plain: cluster && cfg.Partitions > 1,
				}}
			})
		})
	}
}

func (b keySeqStripped) ExportBatch(ctx context.Context, l outbox.Lease, limit int) ([]outbox.EntryInfo, error) {
	infos, err := b.Backend.ExportBatch(ctx, l, limit)
	if err == nil {
		err = keyseqtest.StripInfos(infos, stripKeySeq)
	}
	return infos, err
}

func (b keySeqStripped) Entries(ctx context.Context, state outbox.EntryState, f outbox.ListFilter, after string, limit int) ([]outbox.EntryInfo, error) {
	infos, err := b.Backend.Entries(ctx, state, f, after, limit)
	if err == nil {
		err = keyseqtest.StripInfos(infos, stripKeySeq)
	}
	return infos, err
}

func (b keySeqStripped) BlockedKeys(ctx context.Context, f outbox.ListFilter, after outbox.BlockedKey, limit int) ([]outbox.BlockedKey, error) {
	keys, err := b.Backend.BlockedKeys(ctx, f, after, limit)
	if err == nil {
		err = keyseqtest.StripBlocked(keys, stripKeySeq)
	}
	return keys, err
}
