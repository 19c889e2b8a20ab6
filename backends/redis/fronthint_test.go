package redisoutbox

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/outboxrelay/outbox"
)

// frontFixture appends n entries (keys k0..k4 in turn) to a one-partition
// Backend, takes the lease and fetches the first batch of limit.
func frontFixture(t *testing.T, n, limit int) (*Backend, outbox.Lease, outbox.Batch) {
	t.Helper()
	c := standaloneClient(t)
	ctx := testCtx(t)
	b := newBackend(t, c, Options{Partitions: 1})
	es := make([]outbox.Entry, n)
	for i := range es {
		es[i] = outbox.Entry{ID: fmt.Sprintf("e%02d", i), Topic: "t", Key: fmt.Sprintf("k%d", i%5)}
		if i <= limit {
			// Positions (and scores) a few ms apart: another member can be
			// put between two of the batch.
			require.NoError(t, b.Append(ctx, es[i]))
			time.Sleep(4 * time.Millisecond)
		}
	}
	require.NoError(t, b.Append(ctx, es[limit+1:]...))
	l, err := b.AcquireLease(ctx, 0, "me", time.Minute)
	require.NoError(t, err)
	batch, err := b.FetchBatch(ctx, l, limit)
	require.NoError(t, err)
	require.Len(t, batch.Entries, limit)
	return b, l, batch
}

// claimHinted runs claim.lua as FetchNext does with the front hint of
// inFlight alone, without the entries in flight: when the hint holds, the
// claim starts behind them and returns the IDs it claimed (held true);
// when it does not, the claim asks for the entries in flight (held false).
func claimHinted(t *testing.T, b *Backend, l outbox.Lease, inFlight []outbox.Entry, limit int) (got []string, held bool) {
	t.Helper()
	ks := claimKeys(&b.parts[0])
	hint, _ := b.fronts[0].hint(l, inFlight)
	require.NotEqual(t, "", hint.gen, "the last fetch gave a hint for inFlight")
	args := claimArgs{token: token(l), limit: limit, budget: 4 * limit, fetchNext: true, hint: hint}
	res, err := scriptClaim.Run(context.Background(), b.client, ks, args.argv()...).Result()
	require.NoError(t, err)
	if code, ok := res.(int64); ok {
		require.EqualValues(t, codeHintRefused, code)
		return nil, false
	}
	five := res.([]any)
	require.EqualValues(t, 1, five[4], "a claim that returns entries says the hint held")
	flat := five[0].([]any)
	for i := 0; i < len(flat); i += 2 {
		got = append(got, flat[i].(string))
	}
	return got, true
}

// refused reports whether claimHinted found the hint did not hold.
func refused(t *testing.T, b *Backend, l outbox.Lease, inFlight []outbox.Entry) bool {
	t.Helper()
	_, held := claimHinted(t, b, l, inFlight, 10)
	return !held
}

// memberOf returns the pending member of entry id (read before it leaves).
func memberOf(t *testing.T, b *Backend, id string) string {
	t.Helper()
	v, err := b.client.HGet(context.Background(), b.parts[0].entries, id).Result()
	require.NoError(t, err)
	return v[1:9] + id
}

// scoreOf returns the pending score of entry id.
func scoreOf(t *testing.T, b *Backend, id string) int64 {
	t.Helper()
	sc, err := b.client.ZScore(context.Background(), b.parts[0].pending, memberOf(t, b, id)).Result()
	require.NoError(t, err)
	return int64(sc)
}

// rankOf returns the rank of entry id in pending.
func rankOf(t *testing.T, b *Backend, id string) int64 {
	t.Helper()
	r, err := b.client.ZRank(context.Background(), b.parts[0].pending, memberOf(t, b, id)).Result()
	require.NoError(t, err)
	return r
}

// firstFailed appends es to a one-partition Backend, takes the lease,
// fetches the first entry and fails it with delay (it is retried, so it
// holds back the rest of its key).
func firstFailed(t *testing.T, delay time.Duration, es ...outbox.Entry) (redis.UniversalClient, *Backend, outbox.Lease) {
	t.Helper()
	ctx := testCtx(t)
	c := standaloneClient(t)
	b := newBackend(t, c, Options{Partitions: 1})
	require.NoError(t, b.Append(ctx, es...))
	l, err := b.AcquireLease(ctx, 0, "me", time.Minute)
	require.NoError(t, err)
	got, err := b.FetchBatch(ctx, l, 1)
	require.NoError(t, err)
	require.Equal(t, es[0].ID, got.Entries[0].ID)
	require.NoError(t, b.MarkFailed(ctx, l, []outbox.Failure{{ID: es[0].ID, Error: "x", Delay: delay}}))
	return c, b, l
}

// moveIntoStretch fetches the first batch of a frontFixture again after
// appending y (so its hint has the generation after the append), then
// marks e05 sent and fails y to e05's score: one entry of the batch left
// its stretch and another moved into it, so the batch's first and last
// members keep their ranks and only the generation tells. It returns the
// batch.
func moveIntoStretch(t *testing.T, b *Backend, l outbox.Lease) outbox.Batch {
	t.Helper()
	ctx := testCtx(t)
	require.NoError(t, b.Append(ctx, outbox.Entry{ID: "y", Topic: "t"}))
	first, err := b.FetchBatch(ctx, l, 10)
	require.NoError(t, err)
	at := scoreOf(t, b, "e05")
	require.NoError(t, b.MarkSent(ctx, l, []string{"e05"}))
	now, err := b.client.Time(ctx).Result()
	require.NoError(t, err)
	require.NoError(t, b.MarkFailed(ctx, l, []outbox.Failure{{ID: "y", Error: "x", Delay: time.Duration(at-now.UnixMilli()) * time.Millisecond}}))
	require.Equal(t, int64(9), rankOf(t, b, "e09"), "y is in the batch's stretch")
	return first
}

func idRange(lo, hi int) []string {
	var out []string
	for i := lo; i < hi; i++ {
		out = append(out, fmt.Sprintf("e%02d", i))
	}
	return out
}

// TestFrontHint: a FetchNext whose entries in flight are the first members
// of pending starts behind them (claim.lua's front hint), and every write
// that could put another member in that stretch (an append, a re-score by
// MarkFailed, Import into a held partition, Cancel freeing held-back
// entries) or take one of them out (MarkSent) makes the claim scan from the
// start again.
func TestFrontHint(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)

	t.Run("Holds", func(t *testing.T) {
		t.Parallel()
		b, l, first := frontFixture(t, 30, 10)
		got, held := claimHinted(t, b, l, first.Entries, 10)
		assert.True(t, held)
		assert.Equal(t, idRange(10, 20), got, "started behind the 10 in flight")
		next, err := b.FetchNext(ctx, l, 10, first.Entries)
		require.NoError(t, err)
		assert.Equal(t, idRange(10, 20), ids(next.Entries))
		// The batch fetched ahead gives the hint for the one after it, once
		// the batch before it is marked sent.
		require.NoError(t, b.MarkSent(ctx, l, ids(first.Entries)))
		got, held = claimHinted(t, b, l, next.Entries, 10)
		assert.True(t, held)
		assert.Equal(t, idRange(20, 30), got)
	})
	t.Run("AfterTheyWereSent", func(t *testing.T) {
		t.Parallel()
		// The MarkSent of the entries in flight reached the server before
		// the fetch ahead: pending's first member sorts after the last of
		// them, so none is left and the claim starts at the front.
		b, l, first := frontFixture(t, 30, 10)
		require.NoError(t, b.MarkSent(ctx, l, ids(first.Entries)))
		got, held := claimHinted(t, b, l, first.Entries, 10)
		assert.True(t, held)
		assert.Equal(t, idRange(10, 20), got)
	})
	t.Run("SomeOfThemLeft", func(t *testing.T) {
		t.Parallel()
		b, l, first := frontFixture(t, 30, 10)
		require.NoError(t, b.MarkSent(ctx, l, ids(first.Entries[1:])))
		assert.True(t, refused(t, b, l, first.Entries), "e00 is left: it sorts before where e09 was")
		b, l, first = frontFixture(t, 30, 10)
		require.NoError(t, b.MarkSent(ctx, l, ids(first.Entries[:9])))
		assert.True(t, refused(t, b, l, first.Entries), "e09 is left, first but not at rank 9")
	})
	t.Run("EqualScores", func(t *testing.T) {
		t.Parallel()
		// Appended in one call, the entries share their score: members of
		// one score sort by their bytes (sequence first).
		for _, leave := range []bool{true, false} {
			c := standaloneClient(t)
			b := newBackend(t, c, Options{Partitions: 1})
			es := make([]outbox.Entry, 20)
			for i := range es {
				es[i] = outbox.Entry{ID: fmt.Sprintf("e%02d", i), Topic: "t"}
			}
			require.NoError(t, b.Append(ctx, es...))
			l, err := b.AcquireLease(ctx, 0, "me", time.Minute)
			require.NoError(t, err)
			first, err := b.FetchBatch(ctx, l, 10)
			require.NoError(t, err)
			require.Equal(t, scoreOf(t, b, "e09"), scoreOf(t, b, "e10"), "one score")
			if leave {
				require.NoError(t, b.MarkSent(ctx, l, ids(first.Entries[:9])))
				assert.True(t, refused(t, b, l, first.Entries), "e09 is left")
			} else {
				require.NoError(t, b.MarkSent(ctx, l, ids(first.Entries)))
				got, held := claimHinted(t, b, l, first.Entries, 10)
				assert.True(t, held, "e10 sorts after e09")
				assert.Equal(t, idRange(10, 20), got)
			}
		}
	})
	t.Run("SentAndAnAppend", func(t *testing.T) {
		t.Parallel()
		b, l, first := frontFixture(t, 30, 10)
		require.NoError(t, b.MarkSent(ctx, l, ids(first.Entries)))
		require.NoError(t, b.Append(ctx, outbox.Entry{ID: "late", Topic: "t"}))
		assert.True(t, refused(t, b, l, first.Entries), "the generation changed")
	})
	t.Run("NotForOtherEntriesInFlight", func(t *testing.T) {
		t.Parallel()
		b, l, first := frontFixture(t, 30, 10)
		args, _ := b.fronts[0].hint(l, first.Entries[:9])
		assert.Equal(t, "", args.gen, "not the batch the hint describes: no hint")
		other := l
		other.Version++
		args, _ = b.fronts[0].hint(other, first.Entries)
		assert.Equal(t, "", args.gen, "another lease: no hint")
	})
	t.Run("AnAppend", func(t *testing.T) {
		t.Parallel()
		b, l, first := frontFixture(t, 30, 10)
		// Due before everything pending: it is the first member now.
		require.NoError(t, b.Append(ctx, outbox.Entry{ID: "early", Topic: "t", Key: "k1", NotBefore: time.Unix(1, 0)}))
		assert.True(t, refused(t, b, l, first.Entries))
		// FetchNext sends the hint alone, is refused, and claims again with
		// the entries in flight.
		next, err := b.FetchNext(ctx, l, 10, first.Entries)
		require.NoError(t, err)
		assert.Equal(t, append([]string{"early"}, idRange(10, 19)...), ids(next.Entries), "FetchNext does not skip it")
		// That claim met the entries in flight behind the first one it
		// returned: no hint for its batch.
		args, _ := b.fronts[0].hint(l, next.Entries)
		assert.Equal(t, "", args.gen)
		require.NoError(t, b.MarkSent(ctx, l, ids(first.Entries)))
		after, err := b.FetchNext(ctx, l, 10, next.Entries)
		require.NoError(t, err)
		assert.Equal(t, idRange(19, 29), ids(after.Entries))
		_, alone := b.fronts[0].hint(l, after.Entries)
		assert.False(t, alone, "after a refusal the entries in flight go along")
		require.NoError(t, b.MarkSent(ctx, l, ids(next.Entries)))
		last, err := b.FetchNext(ctx, l, 10, after.Entries)
		require.NoError(t, err)
		assert.Equal(t, []string{"e29"}, ids(last.Entries))
		_, alone = b.fronts[0].hint(l, last.Entries)
		assert.True(t, alone, "a hint that held with them: alone again next time")
	})
	t.Run("MarkFailed", func(t *testing.T) {
		t.Parallel()
		b, l, _ := frontFixture(t, 30, 10)
		first := moveIntoStretch(t, b, l)
		assert.True(t, refused(t, b, l, first.Entries), "a re-score bumps the generation")
	})
	t.Run("MarkSent", func(t *testing.T) {
		t.Parallel()
		b, l, first := frontFixture(t, 30, 10)
		require.NoError(t, b.MarkSent(ctx, l, []string{"e09"}))
		assert.True(t, refused(t, b, l, first.Entries), "one in flight gone: the stretch is not the batch")
	})
	t.Run("ImportWhileHeld", func(t *testing.T) {
		t.Parallel()
		b, l, first := frontFixture(t, 30, 10)
		at := scoreOf(t, b, "e05")
		require.NoError(t, b.MarkSent(ctx, l, []string{"e05"}))
		require.NoError(t, b.Hold(ctx, "move"))
		n, err := b.Import(ctx, []outbox.EntryInfo{imported("imp", "", time.UnixMilli(at+1))})
		require.NoError(t, err)
		require.Equal(t, 1, n)
		require.NoError(t, b.Unhold(ctx))
		require.Equal(t, int64(9), rankOf(t, b, "e09"), "imp is in the stretch")
		assert.True(t, refused(t, b, l, first.Entries), "Hold took a block of sequences (Import draws from it): the generation changed")
	})
	t.Run("CancelFreesHeldBack", func(t *testing.T) {
		t.Parallel()
		c, b, l := firstFailed(t, time.Hour,
			outbox.Entry{ID: "a1", Topic: "t", Key: "k"},
			outbox.Entry{ID: "a2", Topic: "t", Key: "k"})
		// a2 is held back behind a1 and re-scored to a1's retry time.
		_, err := b.FetchBatch(ctx, l, 10)
		require.NoError(t, err)
		before, err := c.Get(ctx, b.parts[0].seq).Int64()
		require.NoError(t, err)
		require.NoError(t, b.Cancel(ctx, "a1"))
		after, err := c.Get(ctx, b.parts[0].seq).Int64()
		require.NoError(t, err)
		assert.Greater(t, after, before, "freeing a2 moved it within pending: the generation changed")
	})
	t.Run("NoneAfterAHoldBack", func(t *testing.T) {
		t.Parallel()
		_, b, l := firstFailed(t, -time.Hour,
			outbox.Entry{ID: "a1", Topic: "t", Key: "k"},
			outbox.Entry{ID: "b1", Topic: "t", Key: "j"},
			outbox.Entry{ID: "a2", Topic: "t", Key: "k"},
			outbox.Entry{ID: "b2", Topic: "t", Key: "j"})
		// a1 is due and attempted: a2 is held back behind it, b1 and b2
		// come between, so the stretch holds an entry left pending.
		batch, err := b.FetchBatch(ctx, l, 3)
		require.NoError(t, err)
		require.Equal(t, []string{"a1", "b1", "b2"}, ids(batch.Entries))
		args, _ := b.fronts[0].hint(l, batch.Entries)
		assert.Equal(t, "", args.gen, "no hint: a2 is in the stretch, left pending")
	})
}

// markFront runs mark_sent.lua in front mode for batch as MarkSent does:
// the number removed, or codeHintRefused.
func markFront(t *testing.T, b *Backend, l outbox.Lease, batch []outbox.Entry) int64 {
	t.Helper()
	k := &b.parts[0]
	ks := []string{k.lease, k.pending, k.entries, k.keyorder, k.parked, k.seq, k.history}
	hint := b.fronts[0].markHint(l, ids(batch))
	require.NotNil(t, hint, "a hint for exactly that batch")
	args := append(append([]any{token(l), "front"}, hint...), anys(ids(batch))...)
	n, err := scriptMarkSent.Run(context.Background(), b.client, ks, args...).Int64()
	require.NoError(t, err)
	return n
}

// TestMarkSentFront: MarkSent of exactly a batch a fetch returned, while
// it is the front of pending, removes it by rank (mark_sent.lua's front
// mode), key-order members included; after any write that could change
// the front the script refuses and MarkSent sends the members instead.
func TestMarkSentFront(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)

	t.Run("Holds", func(t *testing.T) {
		t.Parallel()
		b, l, first := frontFixture(t, 30, 10)
		next, err := b.FetchNext(ctx, l, 10, first.Entries)
		require.NoError(t, err)
		assert.EqualValues(t, 10, markFront(t, b, l, first.Entries), "the batch before the last fetch: its hint is kept too")
		for _, id := range ids(first.Entries) {
			_, err := b.Lookup(ctx, id)
			assert.ErrorIs(t, err, outbox.ErrNotFound)
		}
		require.NoError(t, b.MarkSent(ctx, l, ids(next.Entries)))
		rest, err := b.FetchBatch(ctx, l, 100)
		require.NoError(t, err)
		assert.Equal(t, idRange(20, 30), ids(rest.Entries))
	})
	t.Run("OnlyTheWholeBatch", func(t *testing.T) {
		t.Parallel()
		b, l, first := frontFixture(t, 30, 10)
		assert.Nil(t, b.fronts[0].markHint(l, ids(first.Entries[1:])), "part of it")
		dup := append(ids(first.Entries[:9]), "e00")
		assert.Nil(t, b.fronts[0].markHint(l, dup), "an ID twice")
		other := l
		other.Version++
		assert.Nil(t, b.fronts[0].markHint(other, ids(first.Entries)), "another lease")
	})
	t.Run("RefusedAfterAnAppend", func(t *testing.T) {
		t.Parallel()
		b, l, first := frontFixture(t, 30, 10)
		require.NoError(t, b.Append(ctx, outbox.Entry{ID: "early", Topic: "t", NotBefore: time.Unix(1, 0)}))
		assert.EqualValues(t, codeHintRefused, markFront(t, b, l, first.Entries))
		// MarkSent is refused the same way, then sends the members.
		require.NoError(t, b.MarkSent(ctx, l, ids(first.Entries)))
		assert.Nil(t, b.fronts[0].markHint(l, ids(first.Entries)), "after a refusal the members go along")
		rest, err := b.FetchBatch(ctx, l, 100)
		require.NoError(t, err)
		assert.Equal(t, append([]string{"early"}, idRange(10, 30)...), ids(rest.Entries), "early is kept, the batch removed")
	})
	t.Run("RefusedWhenNotTheFront", func(t *testing.T) {
		t.Parallel()
		b, l, first := frontFixture(t, 30, 10)
		require.NoError(t, b.MarkSent(ctx, l, []string{"e09"}))
		assert.EqualValues(t, codeHintRefused, markFront(t, b, l, first.Entries))
	})
	t.Run("RefusedAfterAMoveIntoTheBatch", func(t *testing.T) {
		t.Parallel()
		b, l, _ := frontFixture(t, 30, 10)
		// Removing the first 10 by rank would remove y.
		first := moveIntoStretch(t, b, l)
		assert.EqualValues(t, codeHintRefused, markFront(t, b, l, first.Entries))
		_, err := b.Lookup(ctx, "y")
		assert.NoError(t, err, "y is still there")
	})
	t.Run("KeyOrderMembers", func(t *testing.T) {
		t.Parallel()
		c, b, l := firstFailed(t, -time.Hour,
			outbox.Entry{ID: "a1", Topic: "t", Key: "k"},
			outbox.Entry{ID: "a2", Topic: "t", Key: "k"},
			outbox.Entry{ID: "b1", Topic: "t", Key: "j"})
		batch, err := b.FetchBatch(ctx, l, 1)
		require.NoError(t, err)
		require.Equal(t, []string{"a1"}, ids(batch.Entries))
		n, err := c.ZCard(ctx, b.parts[0].keyorder).Result()
		require.NoError(t, err)
		require.EqualValues(t, 1, n, "the attempted a1 is in the key-order set")
		assert.EqualValues(t, 1, markFront(t, b, l, batch.Entries))
		n, err = c.ZCard(ctx, b.parts[0].keyorder).Result()
		require.NoError(t, err)
		assert.EqualValues(t, 0, n, "a1 left the key-order set")
		rest, err := b.FetchBatch(ctx, l, 10)
		require.NoError(t, err)
		assert.Equal(t, []string{"a2", "b1"}, ids(rest.Entries), "a2 no longer held back")
	})
}
