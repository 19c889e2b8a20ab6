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

// claimCursor runs claim.lua as FetchNext does with inFlight (through
// claimArgs) and returns the IDs it claimed and whether it started behind
// the entries in flight (the cursor held).
func claimCursor(t *testing.T, b *Backend, l outbox.Lease, inFlight []outbox.Entry, limit int) (got []string, behind bool) {
	t.Helper()
	k := &b.parts[0]
	ks := []string{k.lease, k.pending, k.entries, k.keyorder, k.parked, k.hold}
	args := b.claimArgs(l, limit, inFlight)
	require.Empty(t, args.ids, "the last fetches returned every entry in flight: all go by member")
	res, err := scriptClaim.Run(context.Background(), b.client, ks, args.argv()...).Result()
	require.NoError(t, err)
	three := res.([]any)
	flat := three[0].([]any)
	for i := 0; i < len(flat); i += 2 {
		got = append(got, flat[i].(string))
	}
	return got, three[2].(int64) == 1
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
// appending y, then marks e05 sent and fails y to e05's score: one entry
// of the batch left its stretch and another moved into it, so the batch's
// first and last members keep their ranks. It returns the batch.
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

// TestFetchNextCursor: a FetchNext whose entries in flight are, up to the
// last of them, all of pending's front starts behind them (claim.lua's
// cursor), and a member that entered that stretch (an append due earlier,
// a re-score by MarkFailed, an import, a held-back entry) or an entry in
// flight that left it makes the claim scan from the start, so no entry
// is skipped. The cursor keeps no state between calls: every case is
// checked on what pending holds when the claim runs.
func TestFetchNextCursor(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)

	t.Run("Holds", func(t *testing.T) {
		t.Parallel()
		b, l, first := frontFixture(t, 30, 10)
		got, behind := claimCursor(t, b, l, first.Entries, 10)
		assert.True(t, behind)
		assert.Equal(t, idRange(10, 20), got, "started behind the 10 in flight")
		next, err := b.FetchNext(ctx, l, 10, first.Entries)
		require.NoError(t, err)
		assert.Equal(t, idRange(10, 20), ids(next.Entries))
		// The batch fetched ahead is the cursor of the one after it, once
		// the batch before it is marked sent.
		require.NoError(t, b.MarkSent(ctx, l, ids(first.Entries)))
		got, behind = claimCursor(t, b, l, next.Entries, 10)
		assert.True(t, behind)
		assert.Equal(t, idRange(20, 30), got)
	})
	t.Run("AfterTheyWereSent", func(t *testing.T) {
		t.Parallel()
		// The MarkSent of the entries in flight reached the server before
		// the fetch ahead: none of them is pending, so the claim starts at
		// the front with nothing in flight.
		b, l, first := frontFixture(t, 30, 10)
		require.NoError(t, b.MarkSent(ctx, l, ids(first.Entries)))
		got, behind := claimCursor(t, b, l, first.Entries, 10)
		assert.True(t, behind)
		assert.Equal(t, idRange(10, 20), got)
	})
	t.Run("SomeOfThemLeft", func(t *testing.T) {
		t.Parallel()
		b, l, first := frontFixture(t, 30, 10)
		require.NoError(t, b.MarkSent(ctx, l, ids(first.Entries[1:])))
		got, behind := claimCursor(t, b, l, first.Entries, 10)
		assert.False(t, behind, "the last one in flight is gone, e00 is left")
		assert.Equal(t, idRange(10, 20), got, "e00 is passed over as in flight")
		b, l, first = frontFixture(t, 30, 10)
		require.NoError(t, b.MarkSent(ctx, l, ids(first.Entries[:9])))
		got, behind = claimCursor(t, b, l, first.Entries, 10)
		assert.True(t, behind, "e09 is left, and nothing but it is in front of it")
		assert.Equal(t, idRange(10, 20), got)
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
			} else {
				require.NoError(t, b.MarkSent(ctx, l, ids(first.Entries)))
			}
			got, behind := claimCursor(t, b, l, first.Entries, 10)
			assert.True(t, behind, "leave e09: %v", leave)
			assert.Equal(t, idRange(10, 20), got, "e10 sorts after e09")
		}
	})
	t.Run("SentAndAnAppend", func(t *testing.T) {
		t.Parallel()
		b, l, first := frontFixture(t, 30, 10)
		require.NoError(t, b.MarkSent(ctx, l, ids(first.Entries)))
		require.NoError(t, b.Append(ctx, outbox.Entry{ID: "late", Topic: "t"}))
		got, behind := claimCursor(t, b, l, first.Entries, 30)
		assert.True(t, behind)
		assert.Equal(t, append(idRange(10, 30), "late"), got)
	})
	t.Run("OtherEntriesInFlight", func(t *testing.T) {
		t.Parallel()
		b, l, first := frontFixture(t, 30, 10)
		got, behind := claimCursor(t, b, l, first.Entries[:9], 10)
		assert.True(t, behind, "the first nine of pending are in flight")
		assert.Equal(t, idRange(9, 19), got, "e09 is not in flight: it is claimed")
		other := l
		other.Version++
		args := b.claimArgs(other, 10, first.Entries)
		assert.Empty(t, args.members, "another lease: no member is known")
		assert.Len(t, args.ids, 10)
	})
	t.Run("TwiceTheSameEntry", func(t *testing.T) {
		t.Parallel()
		b, l, first := frontFixture(t, 30, 10)
		dup := append(append([]outbox.Entry{}, first.Entries[:9]...), first.Entries[0])
		assert.Len(t, b.claimArgs(l, 10, dup).members, 9, "each member goes once: the cursor counts them")
		got, behind := claimCursor(t, b, l, dup, 10)
		assert.True(t, behind)
		assert.Equal(t, idRange(9, 19), got)
	})
	t.Run("AnAppend", func(t *testing.T) {
		t.Parallel()
		b, l, first := frontFixture(t, 30, 10)
		// Due before everything pending: it is the first member now.
		require.NoError(t, b.Append(ctx, outbox.Entry{ID: "early", Topic: "t", Key: "k1", NotBefore: time.Unix(1, 0)}))
		_, behind := claimCursor(t, b, l, first.Entries, 10)
		assert.False(t, behind)
		next, err := b.FetchNext(ctx, l, 10, first.Entries)
		require.NoError(t, err)
		assert.Equal(t, append([]string{"early"}, idRange(10, 19)...), ids(next.Entries), "FetchNext does not skip it")
		require.NoError(t, b.MarkSent(ctx, l, ids(first.Entries)))
		got, behind := claimCursor(t, b, l, next.Entries, 10)
		assert.True(t, behind, "early and e10..e18 in flight are pending's front")
		assert.Equal(t, idRange(19, 29), got)
	})
	t.Run("MarkFailed", func(t *testing.T) {
		t.Parallel()
		b, l, _ := frontFixture(t, 30, 10)
		first := moveIntoStretch(t, b, l)
		got, behind := claimCursor(t, b, l, first.Entries, 10)
		assert.False(t, behind, "a re-score into the stretch")
		assert.Equal(t, "y", got[0], "FetchNext does not skip it")
		assert.Equal(t, idRange(10, 19), got[1:])
	})
	t.Run("MarkSent", func(t *testing.T) {
		t.Parallel()
		b, l, first := frontFixture(t, 30, 10)
		require.NoError(t, b.MarkSent(ctx, l, []string{"e09"}))
		got, behind := claimCursor(t, b, l, first.Entries, 10)
		assert.False(t, behind, "the last one in flight gone, the others left")
		assert.Equal(t, idRange(10, 20), got)
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
		got, behind := claimCursor(t, b, l, first.Entries, 10)
		assert.False(t, behind)
		assert.Equal(t, append([]string{"imp"}, idRange(10, 19)...), got, "FetchNext does not skip it")
	})
	t.Run("CancelFreesHeldBack", func(t *testing.T) {
		t.Parallel()
		es := []outbox.Entry{{ID: "a1", Topic: "t", Key: "k"}, {ID: "a2", Topic: "t", Key: "k"}}
		for i := range 6 {
			es = append(es, outbox.Entry{ID: fmt.Sprintf("x%d", i), Topic: "t"})
		}
		_, b, l := firstFailed(t, time.Hour, es...)
		// a2 is held back behind a1 and re-scored to a1's retry time.
		batch, err := b.FetchBatch(ctx, l, 3)
		require.NoError(t, err)
		require.Equal(t, []string{"x0", "x1", "x2"}, ids(batch.Entries))
		require.NoError(t, b.Cancel(ctx, "a1"))
		next, err := b.FetchNext(ctx, l, 10, batch.Entries)
		require.NoError(t, err)
		assert.Equal(t, []string{"x3", "x4", "x5", "a2"}, ids(next.Entries), "a2, freed, is not skipped")
	})
	t.Run("HeldBackInTheStretch", func(t *testing.T) {
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
		got, behind := claimCursor(t, b, l, batch.Entries, 10)
		assert.False(t, behind, "a2 is in the stretch, left pending")
		assert.Empty(t, got, "a2 waits for the attempted a1 in flight")
	})
}

// TestMarkSentAfterFetchingAhead: MarkSent removes a batch by the members
// its fetch returned, whether it is pending's front or not, and leaves
// whatever entered its stretch meanwhile.
func TestMarkSentAfterFetchingAhead(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)

	t.Run("TheBatchBeforeTheLastFetch", func(t *testing.T) {
		t.Parallel()
		b, l, first := frontFixture(t, 30, 10)
		next, err := b.FetchNext(ctx, l, 10, first.Entries)
		require.NoError(t, err)
		require.NoError(t, b.MarkSent(ctx, l, ids(first.Entries)))
		for _, id := range ids(first.Entries) {
			_, err := b.Lookup(ctx, id)
			assert.ErrorIs(t, err, outbox.ErrNotFound)
		}
		require.NoError(t, b.MarkSent(ctx, l, ids(next.Entries)))
		rest, err := b.FetchBatch(ctx, l, 100)
		require.NoError(t, err)
		assert.Equal(t, idRange(20, 30), ids(rest.Entries))
	})
	t.Run("AfterAnAppend", func(t *testing.T) {
		t.Parallel()
		b, l, first := frontFixture(t, 30, 10)
		require.NoError(t, b.Append(ctx, outbox.Entry{ID: "early", Topic: "t", NotBefore: time.Unix(1, 0)}))
		require.NoError(t, b.MarkSent(ctx, l, ids(first.Entries)))
		rest, err := b.FetchBatch(ctx, l, 100)
		require.NoError(t, err)
		assert.Equal(t, append([]string{"early"}, idRange(10, 30)...), ids(rest.Entries), "early is kept, the batch removed")
	})
	t.Run("NotTheFront", func(t *testing.T) {
		t.Parallel()
		b, l, first := frontFixture(t, 30, 10)
		require.NoError(t, b.MarkSent(ctx, l, []string{"e09"}))
		require.NoError(t, b.MarkSent(ctx, l, ids(first.Entries)))
		rest, err := b.FetchBatch(ctx, l, 100)
		require.NoError(t, err)
		assert.Equal(t, idRange(10, 30), ids(rest.Entries))
	})
	t.Run("AfterAMoveIntoTheBatch", func(t *testing.T) {
		t.Parallel()
		b, l, _ := frontFixture(t, 30, 10)
		first := moveIntoStretch(t, b, l)
		require.NoError(t, b.MarkSent(ctx, l, ids(first.Entries)))
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
		require.NoError(t, b.MarkSent(ctx, l, ids(batch.Entries)))
		n, err = c.ZCard(ctx, b.parts[0].keyorder).Result()
		require.NoError(t, err)
		assert.EqualValues(t, 0, n, "a1 left the key-order set")
		rest, err := b.FetchBatch(ctx, l, 10)
		require.NoError(t, err)
		assert.Equal(t, []string{"a2", "b1"}, ids(rest.Entries), "a2 no longer held back")
	})
}
