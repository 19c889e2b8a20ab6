package kafkasink_test

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/outboxrelay/outbox"
	"github.com/outboxrelay/outbox/backoff"
	kafkasink "github.com/outboxrelay/outbox/sinks/kafka"
)

// TestRecreatedTopicWorksAgain: a topic deleted and created again has a
// new topic ID, which kgo does not adopt by itself (it fails the topic
// with UNKNOWN_TOPIC_ID until the topic is purged from producing). A sink
// Dial built purges it, so after a transient failure or two the entries
// of the recreated topic are published.
func TestRecreatedTopicWorksAgain(t *testing.T) {
	t.Parallel()
	c := newCluster(t, 2, []string{"t"})
	sink, err := kafkasink.Dial(c.ListenAddrs(), kafkasink.Options{}, fastRetry...)
	require.NoError(t, err)
	defer sink.Close()
	ctx := context.Background()
	require.NoError(t, sink.Publish(ctx, []outbox.Entry{entry("before", "t", "k", "x")})[0])

	deleteTopic(t, c, "t")
	createTopic(t, c, "t", 2)
	var failures int
	for {
		err := sink.Publish(ctx, []outbox.Entry{entry("after", "t", "k", "y")})[0]
		if err == nil {
			break
		}
		failures++
		require.True(t, errors.Is(err, kerr.UnknownTopicID) || errors.Is(err, kerr.UnknownTopicOrPartition) || errors.Is(err, kerr.InconsistentTopicID), "%v", err)
		assert.Equal(t, backoff.ClassTransient, backoff.ClassOf(err), "%v", err)
		require.Less(t, failures, 20, "the recreated topic never worked again: %v", err)
	}
	recs := consumeQuiet(t, c, []string{"t"})
	require.Len(t, recs, 1, "the new topic holds the record published after it was created")
	assert.Equal(t, "after", kafkasink.EntryID(recs[0]))
	t.Logf("%d failed publishes before the recreated topic worked", failures)
}
