package kafkainbox

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outboxrelay/outbox/inbox"
)

func TestBackoffDoublesUpToTheCap(t *testing.T) {
	t.Parallel()
	o := Options{Group: "g", Topics: []string{"t"}, RetryBackoff: 100 * time.Millisecond, MaxRetryBackoff: time.Second}
	require.NoError(t, o.setDefaults())
	var got []time.Duration
	for attempt := 1; attempt <= 6; attempt++ {
		got = append(got, o.backoff(attempt))
	}
	ms := time.Millisecond
	require.Equal(t, []time.Duration{100 * ms, 200 * ms, 400 * ms, 800 * ms, time.Second, time.Second}, got)

	d := Options{Group: "g", Topics: []string{"t"}}
	require.NoError(t, d.setDefaults())
	require.Equal(t, DefaultRetryBackoff, d.backoff(1))
	require.Equal(t, DefaultMaxRetryBackoff, d.backoff(100))
	require.Equal(t, DefaultMaxBatch, d.MaxBatch)
	require.Equal(t, DefaultStopTimeout, d.StopTimeout)
	require.Equal(t, kgo.NewOffset().AtStart(), d.ResetOffset)
}

// adjust replaces every offset kgo fetched from Kafka with the store's,
// or with ResetOffset for a partition the store has none for, per topic
// and for this group only.
func TestAdjustTakesTheStoresOffsets(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := inbox.NewMemory()
	require.NoError(t, store.InTx(ctx, func(ctx context.Context, tx *inbox.MemoryTx) error {
		return store.SaveOffsets(ctx, tx, []inbox.Offset{
			{Group: "g", Topic: "a", Partition: 0, Next: 17},
			{Group: "g", Topic: "b", Partition: 2, Next: 0},
			{Group: "other", Topic: "a", Partition: 1, Next: 99},
		})
	}))
	ib, err := inbox.New(store, inbox.Options{})
	require.NoError(t, err)
	reset := kgo.NewOffset().AtEnd()
	c, err := NewConsumer(ib, func(context.Context, *inbox.MemoryTx, inbox.Message) error { return nil },
		Options{Group: "g", Topics: []string{"a", "b"}, ResetOffset: reset}, kgo.SeedBrokers("127.0.0.1:1"))
	require.NoError(t, err)
	defer c.cl.Close()
	fromKafka := kgo.NewOffset().At(5)
	got, err := c.adjust(ctx, map[string]map[int32]kgo.Offset{
		"a": {0: fromKafka, 1: fromKafka},
		"b": {2: fromKafka, 3: fromKafka},
	})
	require.NoError(t, err)
	require.Equal(t, map[string]map[int32]kgo.Offset{
		"a": {0: kgo.NewOffset().At(17), 1: reset},
		"b": {2: kgo.NewOffset().At(0), 3: reset},
	}, got)

	c.ib, err = inbox.New(inbox.Store[*inbox.MemoryTx](failingOffsets{store}), inbox.Options{})
	require.NoError(t, err)
	_, err = c.adjust(ctx, map[string]map[int32]kgo.Offset{"a": {0: fromKafka}})
	require.ErrorContains(t, err, `kafkainbox: reading the inbox store's offsets of group "g", topic "a": down`)
}

type failingOffsets struct{ *inbox.Memory }

func (failingOffsets) Offsets(context.Context, string, string) (map[int32]int64, error) {
	return nil, errors.New("down")
}
