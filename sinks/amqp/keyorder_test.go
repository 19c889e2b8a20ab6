package amqpsink_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/outboxrelay/outbox"
	"github.com/outboxrelay/outbox/backoff"
	amqpsink "github.com/outboxrelay/outbox/sinks/amqp"
)

// checkWrittenInOrder checks one call's results against the queue: every
// entry reported published is there, each key's written entries are in
// slice order, and no entry after index culprit (whose publish closed the
// channel) that failed is there: the broker drops a channel's publishes
// after the one it closed the channel for. Entries before the culprit that
// failed may be there (routed, their confirms lost with the channel).
func checkWrittenInOrder(t *testing.T, es []outbox.Entry, errs []error, got []amqp.Delivery, culprit int) {
	t.Helper()
	pos := map[string]int{}
	for i, d := range got {
		if _, dup := pos[d.MessageId]; !dup {
			pos[d.MessageId] = i
		}
	}
	last := map[string]int{} // key -> queue position of its last written entry
	for i, e := range es {
		p, written := pos[e.ID]
		if errs[i] == nil {
			assert.True(t, written, "entry %d (%s) reported published is not in the queue", i, e.ID)
		} else if i >= culprit {
			assert.False(t, written, "entry %d (%s) failed after the channel's failure, but was written: %v", i, e.ID, errs[i])
		}
		if written {
			if l, ok := last[e.Key]; ok {
				assert.Greater(t, p, l, "key %s: entry %d written out of order", e.Key, i)
			}
			last[e.Key] = p
		}
	}
}

// TestKeyOrderAcrossChannelFailure: two keys interleaved on one channel;
// one entry of key "k" goes to a missing exchange, which closes the
// channel. That entry is parked (permanent) and no other; no later entry
// of either key is written after an earlier one of its key failed
// retryably (the call publishes nothing on a new channel once its channel
// died); after the retries each key's first deliveries are in order.
func TestKeyOrderAcrossChannelFailure(t *testing.T) {
	t.Parallel()
	url := brokerURL(t)
	tp := newTopo(t, url)
	missing := uniq("missing")
	var es []outbox.Entry
	// Many entries after the failing one, so that the channel's end
	// reaches the sink while it is still publishing the call.
	for i := range 400 {
		es = append(es, outbox.Entry{ID: fmt.Sprintf("%s-%02d", uniq("e"), i), Topic: tp.exchange, Key: []string{"k", "l"}[i%2], Payload: fmt.Appendf(nil, "%d", i)})
	}
	bad := es[10].ID
	s := dialSink(t, url, amqpsink.Options{Channels: 1, Exchange: func(e outbox.Entry) string {
		if e.ID == bad {
			return missing
		}
		return e.Topic
	}})
	require.True(t, s.KeepsKeyOrder())
	errs := s.Publish(ctxT(t), es)
	requireClass(t, backoff.ClassPermanent, errs[10])
	var retry []outbox.Entry
	okCount := 0
	for i, err := range errs {
		switch {
		case err == nil:
			okCount++
		case backoff.ClassOf(err) != backoff.ClassPermanent:
			retry = append(retry, es[i])
		case i != 10:
			t.Errorf("entry %d parked: %v", i, err)
		}
	}
	// Every message the broker received before the failing one was routed;
	// wait for those reported published, then for whatever else landed.
	got := tp.read(okCount)
	got = append(got, tp.drain()...)
	checkWrittenInOrder(t, es, errs, got, 10)
	assert.NotEmpty(t, retry, "the entries after the failing one were dropped with its channel")

	// The relay publishes the retryable failures again, in order: each
	// key's first deliveries are then in slice order, without the parked
	// one.
	for i, err := range s.Publish(ctxT(t), retry) {
		require.NoError(t, err, "retry %d", i)
	}
	got = append(got, tp.read(len(retry))...)
	want := map[string][]string{}
	for i, e := range es {
		if i != 10 {
			want[e.Key] = append(want[e.Key], e.ID)
		}
	}
	firsts := map[string][]string{}
	seen := map[string]bool{}
	for _, d := range got {
		if !seen[d.MessageId] {
			seen[d.MessageId] = true
			firsts[d.RoutingKey] = append(firsts[d.RoutingKey], d.MessageId)
		}
	}
	assert.Equal(t, want, firsts, "each key's first deliveries in order, the parked entry left out")
}

// TestConcurrentPublishesKeepEachKeysOrder: many keys, several calls at
// once (the relay publishes partitions in parallel), each call holding
// many entries of its keys: every entry is confirmed and in the queue, and
// each key's messages are in order.
func TestConcurrentPublishesKeepEachKeysOrder(t *testing.T) {
	t.Parallel()
	url := brokerURL(t)
	tp := newTopo(t, url)
	s := dialSink(t, url, amqpsink.Options{Channels: 3, MaxPending: 64})
	const calls, keysPerCall, perKey = 4, 10, 20
	var wg sync.WaitGroup
	for c := range calls {
		wg.Go(func() {
			var es []outbox.Entry
			for n := range perKey {
				for k := range keysPerCall {
					es = append(es, outbox.Entry{ID: outbox.NewID(), Topic: tp.exchange, Key: fmt.Sprintf("c%d-k%d", c, k), Payload: fmt.Appendf(nil, "%d", n)})
				}
			}
			for i, err := range s.Publish(context.Background(), es) {
				assert.NoError(t, err, "call %d entry %d", c, i)
			}
		})
	}
	wg.Wait()
	got := tp.read(calls * keysPerCall * perKey)
	next := map[string]int{}
	for _, d := range got {
		var n int
		_, _ = fmt.Sscanf(string(d.Body), "%d", &n)
		assert.Equal(t, next[d.RoutingKey], n, "key %s out of order", d.RoutingKey)
		next[d.RoutingKey] = n + 1
	}
	assert.Len(t, next, calls*keysPerCall)
	assert.False(t, strings.Contains(fmt.Sprint(next), "map[]"))
}
