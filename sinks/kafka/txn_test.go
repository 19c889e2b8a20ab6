package kafkasink_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outboxrelay/outbox"
	"github.com/outboxrelay/outbox/backoff"
	kafkasink "github.com/outboxrelay/outbox/sinks/kafka"
)

func batch(prefix string, n, partition int) []outbox.Entry {
	out := make([]outbox.Entry, n)
	for i := range out {
		out[i] = outbox.Entry{ID: fmt.Sprintf("%s-%d", prefix, i), Topic: "t", Key: fmt.Sprintf("k%d", i), Payload: []byte(prefix), Partition: partition}
	}
	return out
}

// TestTransactionalFencing: a relay that takes a partition over fences
// the previous holder at the broker; the stale holder's records never
// reach read_committed consumers.
func TestTransactionalFencing(t *testing.T) {
	t.Parallel()
	c := newCluster(t, 2, []string{"t"})
	opts := kafkasink.Options{TransactionalIDPrefix: "outbox-test-"}
	old, err := kafkasink.Dial(c.ListenAddrs(), opts)
	require.NoError(t, err)
	defer old.Close()
	newer, err := kafkasink.Dial(c.ListenAddrs(), opts)
	require.NoError(t, err)
	defer newer.Close()
	ctx := context.Background()

	for _, err := range old.Publish(ctx, batch("old-1", 5, 0)) {
		require.NoError(t, err)
	}
	// The partition changes hands: the new holder's producer initializes
	// the same transactional ID, bumping its epoch.
	for _, err := range newer.Publish(ctx, batch("new-1", 5, 0)) {
		require.NoError(t, err)
	}
	// The stale holder publishes again: fenced.
	for _, err := range old.Publish(ctx, batch("stale", 5, 0)) {
		require.ErrorIs(t, err, kafkasink.ErrFenced)
		assert.Equal(t, backoff.ClassTransient, backoff.ClassOf(err))
	}
	// Another partition of the stale holder is unaffected.
	for _, err := range old.Publish(ctx, batch("old-p1", 3, 1)) {
		require.NoError(t, err)
	}

	recs := consumeQuiet(t, c, []string{"t"}, kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	seen := map[string]int{}
	for _, r := range recs {
		seen[string(r.Value)]++
	}
	assert.Equal(t, map[string]int{"old-1": 5, "new-1": 5, "old-p1": 3}, seen)
}

// TestTransactionalOversizeRecordFailsOnlyItself: a transaction is all or
// nothing, so the sink commits the rest of the batch without the record
// that can never be written.
func TestTransactionalOversizeRecordFailsOnlyItself(t *testing.T) {
	t.Parallel()
	c := newCluster(t, 1, []string{"t"}, kfake.BrokerConfigs(map[string]string{"message.max.bytes": "4096"}))
	s, err := kafkasink.Dial(c.ListenAddrs(), kafkasink.Options{TransactionalIDPrefix: "outbox-big-"})
	require.NoError(t, err)
	defer s.Close()
	msgs := batch("b", 6, 0)
	msgs[3].Payload = randomBytes(6000)
	errs := s.Publish(context.Background(), msgs)
	for i, err := range errs {
		if i == 3 {
			require.ErrorIs(t, err, kerr.MessageTooLarge)
			assert.Equal(t, backoff.ClassPermanent, backoff.ClassOf(err))
			continue
		}
		assert.NoError(t, err, "entry %d", i)
	}
	recs := consumeQuiet(t, c, []string{"t"}, kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	assert.Len(t, recs, 5)
}
