package kafkasink_test

import (
	"context"
	"crypto/rand"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/outboxrelay/outbox"
)

// newCluster starts an in-process kfake cluster with the given topics
// (partitions each) and closes it when the test ends.
func newCluster(t testing.TB, partitions int32, topics []string, opts ...kfake.Opt) *kfake.Cluster {
	t.Helper()
	all := append([]kfake.Opt{kfake.NumBrokers(1)}, opts...)
	if len(topics) > 0 {
		all = append(all, kfake.SeedTopics(partitions, topics...))
	}
	c, err := kfake.NewCluster(all...)
	require.NoError(t, err)
	t.Cleanup(c.Close)
	return c
}

// newClient returns a producer client of c, closed when the test ends.
func newClient(t testing.TB, c *kfake.Cluster, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(c.ListenAddrs()...)}, opts...)...)
	require.NoError(t, err)
	t.Cleanup(cl.Close)
	return cl
}

// consume reads n records from topics, from the start, failing the test
// if they do not arrive within 20s.
func consume(t testing.TB, c *kfake.Cluster, n int, topics []string, opts ...kgo.Opt) []*kgo.Record {
	t.Helper()
	cl := newClient(t, c, append([]kgo.Opt{
		kgo.ConsumeTopics(topics...),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
	}, opts...)...)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var out []*kgo.Record
	for len(out) < n {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("consumed %d of %d records before the deadline", len(out), n)
		}
		require.NoError(t, fs.Err0())
		out = append(out, fs.Records()...)
	}
	return out
}

// consumeQuiet reads the records of topics from the start until none
// arrives for 1.5 s (three empty polls of 500 ms).
func consumeQuiet(t testing.TB, c *kfake.Cluster, topics []string, opts ...kgo.Opt) []*kgo.Record {
	t.Helper()
	cl := newClient(t, c, append([]kgo.Opt{
		kgo.ConsumeTopics(topics...),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
	}, opts...)...)
	// Quiet means three polls of 500 ms in a row with nothing: one empty
	// poll ended reads early under load (-race, two busy cores), before
	// the fetch of a slower partition came back.
	var out []*kgo.Record
	for empty := 0; empty < 3; {
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		fs := cl.PollFetches(ctx)
		cancel()
		recs := fs.Records()
		if len(recs) == 0 {
			empty++
			continue
		}
		empty = 0
		out = append(out, recs...)
	}
	return out
}

func entry(id, topic, key, payload string) outbox.Entry {
	return outbox.Entry{ID: id, Topic: topic, Key: key, Payload: []byte(payload)}
}

func entries(n int, topic string, keyFn func(i int) string) []outbox.Entry {
	out := make([]outbox.Entry, n)
	for i := range out {
		out[i] = entry(fmt.Sprintf("id-%04d", i), topic, keyFn(i), fmt.Sprintf("payload-%d", i))
	}
	return out
}

func randomBytes(n int) []byte {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return b
}

// fastRetry makes kgo retry after 10ms instead of its growing default,
// and refresh metadata (which retriable produce errors wait for) every
// 50ms instead of at most every 5s.
var fastRetry = []kgo.Opt{
	kgo.RetryBackoffFn(func(int) time.Duration { return 10 * time.Millisecond }),
	kgo.MetadataMinAge(50 * time.Millisecond),
}

// createTopic creates topic with partitions partitions in c.
func createTopic(t testing.TB, c *kfake.Cluster, topic string, partitions int32) {
	t.Helper()
	req := kmsg.NewPtrCreateTopicsRequest()
	rt := kmsg.NewCreateTopicsRequestTopic()
	rt.Topic, rt.NumPartitions, rt.ReplicationFactor = topic, partitions, 1
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(context.Background(), newClient(t, c))
	require.NoError(t, err)
	require.NoError(t, kerr.ErrorForCode(resp.Topics[0].ErrorCode))
}

// deleteTopic deletes topic from c.
func deleteTopic(t testing.TB, c *kfake.Cluster, topic string) {
	t.Helper()
	req := kmsg.NewPtrDeleteTopicsRequest()
	rt := kmsg.NewDeleteTopicsRequestTopic()
	rt.Topic = kmsg.StringPtr(topic)
	req.Topics = append(req.Topics, rt)
	req.TopicNames = []string{topic}
	resp, err := req.RequestWith(context.Background(), newClient(t, c))
	require.NoError(t, err)
	require.NoError(t, kerr.ErrorForCode(resp.Topics[0].ErrorCode))
}

// fakeClock is a clock for Options.Now that moves only when told; its
// zero value reads 2026-01-01 00:00 UTC.
type fakeClock struct {
	mu sync.Mutex
	d  time.Duration
}

// Now returns the clock's time.
func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).Add(c.d)
}

// Advance moves the clock forward by d.
func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.d += d
}
