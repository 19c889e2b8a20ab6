package controlrelay

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxrelay/outbox"
)

// countingBackend serves FetchBatch with n entries and counts the calls;
// the rest of backend is left nil (not called).
type countingBackend struct {
	backend
	n     int
	calls int
}

func (b *countingBackend) FetchBatch(_ context.Context, _ outbox.Lease, _ int) (outbox.Batch, error) {
	b.calls++
	return outbox.Batch{Entries: make([]outbox.Entry, b.n)}, nil
}

func TestGatheringStoreFetchesAPartitionOncePerGatherUnlessFull(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	inner := &countingBackend{n: 3}
	s := newGatheringStore(inner, 2*time.Second)
	now := time.Unix(1000, 0)
	s.now = func() time.Time { return now }
	p0, p1 := outbox.Lease{Partition: 0}, outbox.Lease{Partition: 1}

	b, err := s.FetchBatch(ctx, p0, 10)
	require.NoError(t, err)
	require.Len(t, b.Entries, 3, "the first fetch of a partition goes through")
	now = now.Add(time.Second)
	b, err = s.FetchBatch(ctx, p0, 10)
	require.NoError(t, err)
	require.Empty(t, b.Entries, "within -gather: nothing due, no store call")
	require.Equal(t, 1, inner.calls)
	_, _ = s.FetchBatch(ctx, p1, 10)
	require.Equal(t, 2, inner.calls, "partitions gather apart")
	now = now.Add(time.Second)
	_, _ = s.FetchBatch(ctx, p0, 10)
	require.Equal(t, 3, inner.calls, "after -gather the partition is fetched again")

	inner.n = 10 // a full batch: the rest is fetched at once
	_, _ = s.FetchBatch(ctx, p0, 10)
	require.Equal(t, 3, inner.calls)
	now = now.Add(2 * time.Second)
	_, _ = s.FetchBatch(ctx, p0, 10)
	_, _ = s.FetchBatch(ctx, p0, 10)
	require.Equal(t, 5, inner.calls, "a full batch is followed by a fetch at once")
}
