package memory_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxrelay/outbox"
)

// PurgeParked judges an entry by when it was parked by the backend's
// clock: at the MarkFailed that parked it, or at the Import that stored it
// parked (the time it was parked in the source is not known), and removes
// it as Cancel would.
func TestPurgeParkedByParkTime(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b, c := newBackend(t, 1)
	appendAll(t, b, outbox.Entry{ID: "failed", Topic: "t", Key: "k"})
	l := acquire(t, b, 0, "relay")
	batch, err := b.FindPendingBatch(ctx, l, 10)
	require.NoError(t, err)
	require.Len(t, batch, 1)
	parkedAt := c.Now()
	require.NoError(t, b.MarkFailed(ctx, l, []outbox.Failure{{ID: "failed", Error: "poison", Park: true}}))
	c.Advance(time.Hour)
	importedAt := c.Now()
	n, err := b.Import(ctx, []outbox.EntryInfo{{
		Entry:   outbox.Entry{ID: "imported", Topic: "t", Key: "j", Attempts: 3, CreatedAt: parkedAt.Add(-24 * time.Hour)},
		Parked:  true,
		History: []outbox.Attempt{{At: parkedAt.Add(-23 * time.Hour), Error: "poison"}},
	}})
	require.NoError(t, err)
	require.Equal(t, 1, n)
	c.Advance(time.Minute)

	ids, more, err := b.PurgeParked(ctx, parkedAt, 10)
	require.NoError(t, err)
	require.Empty(t, ids, "nothing was parked before the first park")
	require.False(t, more)
	ids, more, err = b.PurgeParked(ctx, importedAt, 10)
	require.NoError(t, err)
	require.Equal(t, []string{"failed"}, ids, "the imported entry counts as parked at its import")
	require.False(t, more)
	ids, _, err = b.PurgeParked(ctx, c.Now(), 10)
	require.NoError(t, err)
	require.Equal(t, []string{"imported"}, ids)
	for _, id := range []string{"failed", "imported"} {
		_, err := b.Lookup(ctx, id)
		require.True(t, errors.Is(err, outbox.ErrNotFound), "Lookup(%s) after PurgeParked: %v", id, err)
	}
	_, _, err = b.PurgeParked(ctx, c.Now(), 0)
	require.ErrorIs(t, err, outbox.ErrInvalidArgument)
	require.NoError(t, b.Close())
	_, _, err = b.PurgeParked(ctx, c.Now(), 10)
	require.ErrorIs(t, err, outbox.ErrClosed)
}
