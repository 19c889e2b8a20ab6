package redisoutbox

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/outboxrelay/outbox"
)

func TestStoredPartitionCount(t *testing.T) {
	t.Parallel()
	for _, tg := range targets {
		t.Run(tg.name, func(t *testing.T) {
			t.Parallel()
			c := tg.client(t)
			t.Run("CreateThenRead", func(t *testing.T) { t.Parallel(); testCreateThenRead(t, c) })
			t.Run("RacingConstructorsAgree", func(t *testing.T) { t.Parallel(); testRacingConstructors(t, c) })
			t.Run("OutboxOfAnEarlierBuild", func(t *testing.T) { t.Parallel(); testEarlierBuildOutbox(t, c) })
			t.Run("HarnessReopen", func(t *testing.T) { t.Parallel(); testHarnessReopen(t, c) })
		})
	}
}

// open runs New on prefix and, when it succeeds, deletes the outbox's
// keys when the test ends.
func open(t *testing.T, c redis.UniversalClient, prefix string, partitions int) (*Backend, error) {
	t.Helper()
	b, err := New(testCtx(t), c, Options{Prefix: prefix, Partitions: partitions})
	if err == nil {
		t.Cleanup(func() { _ = b.Close(); deleteKeys(c, b) })
	}
	return b, err
}

func testCreateThenRead(t *testing.T, c redis.UniversalClient) {
	ctx := testCtx(t)
	prefix := uniquePrefix()
	_, err := open(t, c, prefix, 0)
	require.ErrorIs(t, err, outbox.ErrInvalidArgument)
	assert.True(t, strings.HasPrefix(err.Error(), "redisoutbox: New: no outbox exists at prefix "+strconv.Quote(prefix)), err.Error())
	assert.Contains(t, err.Error(), "pass Options.Partitions", "the error says how to create one")
	n, err := c.Exists(ctx, prefix+":meta").Result()
	require.NoError(t, err)
	assert.Zero(t, n, "reading creates nothing")

	before := serverMillis(t, ctx, c)
	b, err := open(t, c, prefix, 4)
	require.NoError(t, err)
	assert.Equal(t, 4, b.Partitions())
	meta, err := c.HGetAll(ctx, prefix+":meta").Result()
	require.NoError(t, err)
	assert.Equal(t, "4", meta["partitions"])
	created, err := strconv.ParseInt(meta["created-at"], 10, 64)
	require.NoError(t, err)
	assert.GreaterOrEqual(t, created, before, "created-at is the server's time")

	for _, configured := range []int{0, 4} {
		b, err := open(t, c, prefix, configured)
		require.NoError(t, err, "configured %d", configured)
		assert.Equal(t, 4, b.Partitions(), "configured %d", configured)
	}
	_, err = open(t, c, prefix, 8)
	var mismatch *outbox.PartitionMismatchError
	require.ErrorAs(t, err, &mismatch)
	assert.Equal(t, outbox.PartitionMismatchError{Outbox: prefix, Configured: 8, Stored: 4}, *mismatch)
	assert.ErrorIs(t, err, outbox.ErrInvalidArgument)
	assert.True(t, strings.HasPrefix(err.Error(), "redisoutbox: New: "), err.Error())
	meta, err = c.HGetAll(ctx, prefix+":meta").Result()
	require.NoError(t, err)
	assert.Equal(t, "4", meta["partitions"], "a mismatch changes nothing")
}

// testRacingConstructors: constructors racing to create one outbox agree
// on the count the first one stored.
func testRacingConstructors(t *testing.T, c redis.UniversalClient) {
	prefix := uniquePrefix()
	const racers = 8
	var wg sync.WaitGroup
	backends := make([]*Backend, racers)
	errs := make([]error, racers)
	for i := range racers {
		wg.Go(func() { backends[i], errs[i] = open(t, c, prefix, i+1) })
	}
	wg.Wait()
	winner := 0
	for i, err := range errs {
		if err == nil {
			require.Zero(t, winner, "two counts were accepted")
			winner = backends[i].Partitions()
			require.Equal(t, i+1, winner)
		}
	}
	require.NotZero(t, winner, "no constructor succeeded: %v", errors.Join(errs...))
	for i, err := range errs {
		if err != nil {
			var mismatch *outbox.PartitionMismatchError
			require.ErrorAs(t, err, &mismatch)
			assert.Equal(t, outbox.PartitionMismatchError{Outbox: prefix, Configured: i + 1, Stored: winner}, *mismatch)
		}
	}
	// Constructors racing with the same count all succeed.
	same := uniquePrefix()
	for i := range racers {
		wg.Go(func() { backends[i], errs[i] = open(t, c, same, 3) })
	}
	wg.Wait()
	for i := range racers {
		require.NoError(t, errs[i])
		assert.Equal(t, 3, backends[i].Partitions())
	}
}

// testEarlierBuildOutbox: an outbox written by a build before the count
// was stored has partition keys but no meta key. New with 0 says so; the
// first New with a count stores it.
func testEarlierBuildOutbox(t *testing.T, c redis.UniversalClient) {
	ctx := testCtx(t)
	prefix := uniquePrefix()
	k := partitionKeys(prefix, 0)
	require.NoError(t, c.Set(ctx, k.seq, 5, 0).Err())
	t.Cleanup(func() { c.Del(context.Background(), k.seq) })
	_, err := open(t, c, prefix, 0)
	require.ErrorIs(t, err, outbox.ErrInvalidArgument)
	assert.Contains(t, err.Error(), "created by an earlier build")
	assert.Contains(t, err.Error(), "1 if it was never set")
	b, err := open(t, c, prefix, 1)
	require.NoError(t, err)
	require.NoError(t, b.Append(ctx, outbox.Entry{ID: "after", Topic: "t"}))
	b, err = open(t, c, prefix, 0)
	require.NoError(t, err)
	assert.Equal(t, 1, b.Partitions())
}

// testHarnessReopen checks the conformance harness's Reopen: it opens the
// same outbox through New.
func testHarnessReopen(t *testing.T, c redis.UniversalClient) {
	ctx := testCtx(t)
	h := &harness{b: newBackend(t, c, Options{Partitions: 3}), c: c}
	require.NoError(t, h.b.Append(ctx, outbox.Entry{ID: "e1", Topic: "t"}))
	s, err := h.Reopen(ctx, 0)
	require.NoError(t, err)
	defer s.Close()
	assert.Equal(t, 3, s.Partitions())
	st, err := s.(outbox.Inspector).Stats(ctx)
	require.NoError(t, err)
	assert.EqualValues(t, 1, st.Pending, "the same outbox")
	s2, err := h.Reopen(ctx, 3)
	require.NoError(t, err)
	require.NoError(t, s2.Close())
	s3, err := h.Reopen(ctx, 5)
	var mismatch *outbox.PartitionMismatchError
	require.ErrorAs(t, err, &mismatch)
	assert.Nil(t, s3, "a failed Reopen returns a nil Store, not a nil *Backend in one")
}

func TestOptionsPartitionsRange(t *testing.T) {
	t.Parallel()
	for _, n := range []int{-1, maxPartitions + 1} {
		_, err := New(context.Background(), redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}), Options{Partitions: n})
		require.Error(t, err, n)
		assert.Contains(t, err.Error(), "Options.Partitions is "+strconv.Itoa(n))
		assert.Contains(t, err.Error(), "use 0 (read the count stored with the outbox)")
	}
}
