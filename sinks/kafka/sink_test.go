package kafkasink_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/outboxrelay/outbox"
	"github.com/outboxrelay/outbox/backoff"
	kafkasink "github.com/outboxrelay/outbox/sinks/kafka"
)

func TestPublishRecordsKeysHeadersAndPerKeyOrder(t *testing.T) {
	t.Parallel()
	topics := []string{"orders", "invoices"}
	c := newCluster(t, 4, topics)
	sink, err := kafkasink.New(newClient(t, c), kafkasink.Options{AttemptHeader: "outbox-attempt"})
	require.NoError(t, err)

	// 30 keys, 10 entries each, plus 20 unkeyed entries, published the way
	// the relay does: no two entries of one key in one call.
	const keys, perKey = 30, 10
	var rounds [][]outbox.Entry
	want := map[string]outbox.Entry{}
	for r := range perKey {
		var batch []outbox.Entry
		for k := range keys {
			e := outbox.Entry{
				ID:       fmt.Sprintf("k%02d-%02d", k, r),
				Topic:    topics[k%2],
				Key:      fmt.Sprintf("key-%02d", k),
				Payload:  fmt.Appendf(nil, "%d", r),
				Headers:  map[string]string{"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", "tenant": "acme", "outbox-id": "spoofed"},
				Attempts: r % 3,
			}
			batch = append(batch, e)
			want[e.ID] = e
		}
		for u := range 2 {
			e := outbox.Entry{ID: fmt.Sprintf("u-%02d-%d", r, u), Topic: "orders", Payload: []byte("unkeyed")}
			batch = append(batch, e)
			want[e.ID] = e
		}
		rounds = append(rounds, batch)
	}
	for _, batch := range rounds {
		errs := sink.Publish(context.Background(), batch)
		require.Len(t, errs, len(batch))
		for i, err := range errs {
			require.NoError(t, err, "entry %s", batch[i].ID)
		}
	}

	recs := consume(t, c, len(want), topics)
	require.Len(t, recs, len(want))
	lastSeq := map[string]int{}
	partOf := map[string]int32{}
	for _, rec := range recs {
		id := kafkasink.EntryID(rec)
		e, ok := want[id]
		require.True(t, ok, "unexpected record id %q", id)
		delete(want, id)
		assert.Equal(t, e.Topic, rec.Topic)
		assert.Equal(t, e.Payload, rec.Value)
		attempt, _ := kafkasink.Header(rec, "outbox-attempt")
		assert.Equal(t, strconv.Itoa(e.Attempts+1), attempt)
		if e.Key == "" {
			assert.Nil(t, rec.Key, "an empty entry key becomes a nil record key")
			continue
		}
		assert.Equal(t, e.Key, string(rec.Key))
		tp, _ := kafkasink.Header(rec, "traceparent")
		assert.Equal(t, e.Headers["traceparent"], tp)
		tenant, _ := kafkasink.Header(rec, "tenant")
		assert.Equal(t, "acme", tenant)
		n := 0
		for _, h := range rec.Headers {
			if h.Key == kafkasink.DefaultIDHeader {
				n++
			}
		}
		assert.Equal(t, 1, n, "the entry's own outbox-id header must not shadow the ID")

		// One partition per key, records of a key in publish order.
		if p, seen := partOf[e.Key]; seen {
			assert.Equal(t, p, rec.Partition, "key %s spread over two partitions", e.Key)
		}
		partOf[e.Key] = rec.Partition
		seq, _ := strconv.Atoi(string(rec.Value))
		if last, seen := lastSeq[e.Key]; seen {
			assert.Greater(t, seq, last, "key %s out of order", e.Key)
		}
		lastSeq[e.Key] = seq
	}
	assert.Empty(t, want, "entries never consumed")
	assert.Len(t, lastSeq, keys)
}

func TestPublishEmptyAndTopicMapping(t *testing.T) {
	t.Parallel()
	c := newCluster(t, 1, []string{"fallback", "mapped-a"})
	cl := newClient(t, c)

	sink, err := kafkasink.New(cl, kafkasink.Options{})
	require.NoError(t, err)
	assert.Empty(t, sink.Publish(context.Background(), nil))

	// No topic and no default: permanent, nothing produced.
	errs := sink.Publish(context.Background(), []outbox.Entry{{ID: "x"}})
	require.Error(t, errs[0])
	assert.Equal(t, backoff.ClassPermanent, backoff.ClassOf(errs[0]))
	assert.Contains(t, errs[0].Error(), "kafkasink:")

	sink, err = kafkasink.New(cl, kafkasink.Options{DefaultTopic: "fallback"})
	require.NoError(t, err)
	require.NoError(t, sink.Publish(context.Background(), []outbox.Entry{{ID: "d1", Payload: []byte("p")}})[0])

	sink, err = kafkasink.New(cl, kafkasink.Options{
		IDHeader: "x-entry",
		Topic:    func(e outbox.Entry) string { return "mapped-" + e.Topic },
	})
	require.NoError(t, err)
	require.NoError(t, sink.Publish(context.Background(), []outbox.Entry{{ID: "m1", Topic: "a"}})[0])

	recs := consume(t, c, 2, []string{"fallback", "mapped-a"})
	got := map[string]string{}
	for _, r := range recs {
		if id := kafkasink.EntryID(r); id != "" {
			got[r.Topic] = id
		} else {
			id, _ := kafkasink.Header(r, "x-entry")
			got[r.Topic] = "x-entry:" + id
		}
	}
	assert.Equal(t, map[string]string{"fallback": "d1", "mapped-a": "x-entry:m1"}, got)
}

func TestNewRejectsUnsafeClients(t *testing.T) {
	t.Parallel()
	c := newCluster(t, 1, []string{"t"})
	for name, opt := range map[string]kgo.Opt{
		"DisableIdempotentWrite": kgo.DisableIdempotentWrite(),
		"ManualFlushing":         kgo.ManualFlushing(),
		"TransactionalID":        kgo.TransactionalID("x"),
	} {
		_, err := kafkasink.New(newClient(t, c, opt), kafkasink.Options{})
		require.Error(t, err, name)
		assert.Contains(t, err.Error(), name)
	}
	_, err := kafkasink.New(nil, kafkasink.Options{})
	require.Error(t, err)
	_, err = kafkasink.New(newClient(t, c), kafkasink.Options{TransactionalIDPrefix: "outbox-"})
	require.ErrorContains(t, err, "use Dial")
	_, err = kafkasink.Dial(nil, kafkasink.Options{})
	require.ErrorContains(t, err, "seed broker")
	_, err = kafkasink.Dial(c.ListenAddrs(), kafkasink.Options{}, kgo.DisableIdempotentWrite())
	require.ErrorContains(t, err, "DisableIdempotentWrite")
}

// TestInjectedProduceErrorsAreClassified fails every produce request to a
// topic with one Kafka error code and checks the class Publish reports.
func TestInjectedProduceErrorsAreClassified(t *testing.T) {
	t.Parallel()
	cases := []struct {
		err   *kerr.Error
		class backoff.Class
	}{
		{kerr.NotEnoughReplicas, backoff.ClassTransient},
		{kerr.NotLeaderForPartition, backoff.ClassTransient},
		{kerr.LeaderNotAvailable, backoff.ClassTransient},
		{kerr.FencedLeaderEpoch, backoff.ClassTransient},
		{kerr.UnknownTopicOrPartition, backoff.ClassTransient}, // until Options.UnknownTopicTimeout
		{kerr.UnknownTopicID, backoff.ClassTransient},
		{kerr.KafkaStorageError, backoff.ClassTransient},
		{kerr.CorruptMessage, backoff.ClassTransient},
		{kerr.UnknownServerError, backoff.ClassTransient},
		{kerr.RequestTimedOut, backoff.ClassSemiTransient},
		{kerr.ThrottlingQuotaExceeded, backoff.ClassSemiTransient},
		{kerr.MessageTooLarge, backoff.ClassPermanent},
		{kerr.RecordListTooLarge, backoff.ClassPermanent},
		{kerr.InvalidTopicException, backoff.ClassPermanent},
		{kerr.TopicAuthorizationFailed, backoff.ClassPermanent},
		{kerr.ClusterAuthorizationFailed, backoff.ClassPermanent},
		{kerr.InvalidRecord, backoff.ClassPermanent},
		{kerr.PolicyViolation, backoff.ClassPermanent},
		{kerr.InvalidTimestamp, backoff.ClassSemiTransient},
		{kerr.UnsupportedForMessageFormat, backoff.ClassPermanent},
	}
	for _, tc := range cases {
		t.Run(tc.err.Message, func(t *testing.T) {
			t.Parallel()
			c := newCluster(t, 2, []string{"faulty", "healthy"})
			c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: "faulty", Err: tc.err, Count: -1})
			// A broker's REQUEST_TIMED_OUT leaves the idempotent producer
			// unsure whether the batch was written, so kgo retries it
			// beyond RecordRetries and only PublishTimeout ends it.
			timeout := 10 * time.Second
			if tc.err == kerr.RequestTimedOut {
				timeout = time.Second
			}
			sink, err := kafkasink.New(newClient(t, c, append(fastRetry, kgo.RecordRetries(1))...), kafkasink.Options{PublishTimeout: timeout})
			require.NoError(t, err)

			msgs := []outbox.Entry{
				entry("bad-1", "faulty", "a", "x"),
				entry("good-1", "healthy", "b", "y"),
				entry("bad-2", "faulty", "c", "z"),
			}
			errs := sink.Publish(context.Background(), msgs)
			for _, i := range []int{0, 2} {
				require.Error(t, errs[i])
				if tc.err == kerr.RequestTimedOut {
					assert.ErrorIs(t, errs[i], context.DeadlineExceeded)
				} else {
					assert.ErrorIs(t, errs[i], tc.err)
				}
				class := tc.class
				if i == 2 && (tc.err == kerr.InvalidRecord || tc.err == kerr.PolicyViolation) {
					// A batch refused for its content: bad-2 failed behind
					// bad-1 in their partition, and is retried on its own
					// rather than parked.
					class = backoff.ClassTransient
					assert.Contains(t, errs[i].Error(), "failed with entry bad-1")
				}
				assert.Equal(t, class, backoff.ClassOf(errs[i]), "%v", errs[i])
				assert.Contains(t, errs[i].Error(), msgs[i].ID)
			}
			assert.NoError(t, errs[1], "an entry of a healthy topic fails with its neighbours")
		})
	}
}

// TestTransientFaultThenSuccess: a few retriable failures are absorbed by
// kgo's own retries; the records arrive once each.
func TestTransientFaultIsRetriedByTheProducer(t *testing.T) {
	t.Parallel()
	c := newCluster(t, 1, []string{"t"})
	h := c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: "t", Err: kerr.NotEnoughReplicas, Count: 3})
	sink, err := kafkasink.New(newClient(t, c, append(fastRetry, kgo.RecordRetries(10))...), kafkasink.Options{})
	require.NoError(t, err)
	msgs := entries(20, "t", func(i int) string { return "k" + strconv.Itoa(i) })
	for _, err := range sink.Publish(context.Background(), msgs) {
		require.NoError(t, err)
	}
	assert.Equal(t, 3, h.Hits())
	assert.Len(t, consumeQuiet(t, c, []string{"t"}), 20)
}

func TestOversizeRecordFailsOnlyItself(t *testing.T) {
	t.Parallel()
	t.Run("BrokerLimit", func(t *testing.T) {
		t.Parallel()
		// The broker takes batches of at most 4 KiB; the client's own limit
		// is the 1 MB default, so records share batches and the broker
		// rejects the batch holding the oversize record.
		c := newCluster(t, 1, []string{"t"}, kfake.BrokerConfigs(map[string]string{"message.max.bytes": "4096"}))
		sink, err := kafkasink.New(newClient(t, c, kgo.ProducerLinger(50*time.Millisecond)), kafkasink.Options{})
		require.NoError(t, err)
		msgs := entries(10, "t", func(i int) string { return "k" + strconv.Itoa(i) })
		msgs[4].Payload = randomBytes(6000) // kgo compresses: repeated bytes would shrink below the limit
		errs := sink.Publish(context.Background(), msgs)
		for i, err := range errs {
			if i == 4 {
				require.ErrorIs(t, err, kerr.MessageTooLarge)
				assert.Equal(t, backoff.ClassPermanent, backoff.ClassOf(err))
				assert.Contains(t, err.Error(), "max.message.bytes")
				continue
			}
			assert.NoError(t, err, "entry %d", i)
		}
		recs := consumeQuiet(t, c, []string{"t"})
		assert.Len(t, recs, 9)
	})
	t.Run("ClientLimit", func(t *testing.T) {
		t.Parallel()
		c := newCluster(t, 1, []string{"t"})
		sink, err := kafkasink.New(newClient(t, c, kgo.ProducerBatchMaxBytes(2048)), kafkasink.Options{})
		require.NoError(t, err)
		msgs := entries(5, "t", func(i int) string { return "k" + strconv.Itoa(i) })
		msgs[2].Payload = randomBytes(3000)
		errs := sink.Publish(context.Background(), msgs)
		for i, err := range errs {
			if i == 2 {
				require.ErrorIs(t, err, kerr.MessageTooLarge)
				assert.Equal(t, backoff.ClassPermanent, backoff.ClassOf(err))
				continue
			}
			assert.NoError(t, err, "entry %d", i)
		}
	})
}

// TestUnknownTopicParksAfterTimeout: with auto-create off, an entry of a
// topic the brokers do not know fails as transient, naming the topic,
// until the topic has been unknown for UnknownTopicTimeout (on the sink's
// clock), and permanently from then on; an entry of a known topic in the
// same call succeeds each time.
func TestUnknownTopicParksAfterTimeout(t *testing.T) {
	t.Parallel()
	c := newCluster(t, 1, []string{"exists"}) // auto-create off (kfake's default)
	publish := func(sink *kafkasink.Sink, id string) error {
		t.Helper()
		errs := sink.Publish(context.Background(), []outbox.Entry{
			entry(id, "missing", "k1", "x"),
			entry(id+"-ok", "exists", "k2", "y"),
		})
		require.NoError(t, errs[1])
		require.ErrorIs(t, errs[0], kerr.UnknownTopicOrPartition)
		assert.Contains(t, errs[0].Error(), `topic "missing"`)
		assert.Contains(t, errs[0].Error(), id)
		return errs[0]
	}

	t.Run("Default", func(t *testing.T) {
		t.Parallel()
		clock := &fakeClock{}
		sink, err := kafkasink.New(newClient(t, c, append(fastRetry, kgo.AllowAutoTopicCreation())...), kafkasink.Options{UnknownTopicTimeout: time.Minute, Now: clock.Now})
		require.NoError(t, err)
		err = publish(sink, "a")
		assert.Equal(t, backoff.ClassTransient, backoff.ClassOf(err), "%v", err)
		assert.Contains(t, err.Error(), "for 0s so far")
		clock.Advance(59 * time.Second)
		err = publish(sink, "b")
		assert.Equal(t, backoff.ClassTransient, backoff.ClassOf(err), "%v", err)
		assert.Contains(t, err.Error(), "for 59s so far")
		clock.Advance(time.Second)
		err = publish(sink, "c")
		assert.Equal(t, backoff.ClassPermanent, backoff.ClassOf(err), "%v", err)
		assert.Contains(t, err.Error(), "for 1m0s")
		assert.Contains(t, err.Error(), "create the topic")
	})
	t.Run("Negative", func(t *testing.T) {
		t.Parallel()
		clock := &fakeClock{}
		sink, err := kafkasink.New(newClient(t, c, fastRetry...), kafkasink.Options{UnknownTopicTimeout: -1, Now: clock.Now})
		require.NoError(t, err)
		err = publish(sink, "d")
		assert.Equal(t, backoff.ClassTransient, backoff.ClassOf(err), "%v", err)
		clock.Advance(24 * time.Hour)
		err = publish(sink, "e")
		assert.Equal(t, backoff.ClassTransient, backoff.ClassOf(err), "%v", err)
		assert.Contains(t, err.Error(), "attempt limit")
	})
	t.Run("ClassifyPermanent", func(t *testing.T) {
		t.Parallel()
		classify := func(err error) backoff.Class {
			if errors.Is(err, kerr.UnknownTopicOrPartition) {
				return backoff.ClassPermanent
			}
			return kafkasink.Classify(err)
		}
		sink, err := kafkasink.New(newClient(t, c), kafkasink.Options{Classify: classify})
		require.NoError(t, err)
		errs := sink.Publish(context.Background(), []outbox.Entry{entry("f", "missing", "k1", "x")})
		require.ErrorIs(t, errs[0], kerr.UnknownTopicOrPartition)
		assert.Equal(t, backoff.ClassPermanent, backoff.ClassOf(errs[0]), "parks at once")
		assert.Contains(t, errs[0].Error(), "create it")
	})
}

// TestUnknownTopicClockRestartsOnceTheTopicWorks: a topic that was
// unknown and then created is forgotten once one of its records is
// acknowledged; if it becomes unknown again, its time starts again.
func TestUnknownTopicClockRestartsOnceTheTopicWorks(t *testing.T) {
	t.Parallel()
	c := newCluster(t, 1, nil)
	clock := &fakeClock{}
	sink, err := kafkasink.Dial(c.ListenAddrs(), kafkasink.Options{UnknownTopicTimeout: time.Minute, Now: clock.Now}, fastRetry...)
	require.NoError(t, err)
	defer sink.Close()
	ctx := context.Background()

	err = sink.Publish(ctx, []outbox.Entry{entry("a", "late", "k", "x")})[0]
	require.ErrorIs(t, err, kerr.UnknownTopicOrPartition)
	assert.Equal(t, backoff.ClassTransient, backoff.ClassOf(err), "%v", err)

	createTopic(t, c, "late", 1)
	clock.Advance(2 * time.Minute) // past the timeout: only a success resets it
	require.NoError(t, sink.Publish(ctx, []outbox.Entry{entry("a", "late", "k", "x")})[0])

	deleteTopic(t, c, "late")
	var last error
	for range 50 { // kgo learns of the deletion at its next metadata refresh
		last = sink.Publish(ctx, []outbox.Entry{entry("b", "late", "k", "y")})[0]
		if last != nil {
			break
		}
	}
	require.Error(t, last)
	require.True(t, errors.Is(last, kerr.UnknownTopicOrPartition) || errors.Is(last, kerr.UnknownTopicID), "%v", last)
	assert.Equal(t, backoff.ClassTransient, backoff.ClassOf(last), "the clock started again: %v", last)
	assert.Contains(t, last.Error(), "for 0s so far")
}

func TestUnknownTopicWithAutoCreateIsCreated(t *testing.T) {
	t.Parallel()
	c := newCluster(t, 1, nil, kfake.AllowAutoTopicCreation())
	sink, err := kafkasink.New(newClient(t, c, kgo.AllowAutoTopicCreation()), kafkasink.Options{})
	require.NoError(t, err)
	require.NoError(t, sink.Publish(context.Background(), []outbox.Entry{entry("a", "fresh", "k", "x")})[0])
	assert.Len(t, consume(t, c, 1, []string{"fresh"}), 1)
}

// deadAddr returns a 127.0.0.1 address nothing listens on.
func deadAddr(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close())
	return addr
}

func TestUnreachableBrokerIsSemiTransient(t *testing.T) {
	t.Parallel()
	sink, err := kafkasink.Dial([]string{deadAddr(t)}, kafkasink.Options{PublishTimeout: time.Second})
	require.NoError(t, err)
	defer sink.Close()
	start := time.Now()
	errs := sink.Publish(context.Background(), []outbox.Entry{entry("a", "t", "k", "x"), entry("b", "t", "", "y")})
	for _, err := range errs {
		require.Error(t, err)
		assert.Equal(t, backoff.ClassSemiTransient, backoff.ClassOf(err), "%v", err)
		assert.Contains(t, err.Error(), "connection refused", "the error explains the timeout")
	}
	assert.Less(t, time.Since(start), 15*time.Second, "Publish is bounded by PublishTimeout")

	// The same through a caller's client with kgo defaults (unlimited
	// retries): PublishTimeout still bounds it.
	cl, err := kgo.NewClient(kgo.SeedBrokers(deadAddr(t)))
	require.NoError(t, err)
	defer cl.Close()
	sink2, err := kafkasink.New(cl, kafkasink.Options{PublishTimeout: 500 * time.Millisecond})
	require.NoError(t, err)
	err = sink2.Publish(context.Background(), []outbox.Entry{entry("a", "t", "k", "x")})[0]
	require.ErrorIs(t, err, context.DeadlineExceeded)
	assert.Equal(t, backoff.ClassSemiTransient, backoff.ClassOf(err))
	assert.Contains(t, err.Error(), "PublishTimeout")
}

func TestBrokerGoesDownMidRun(t *testing.T) {
	t.Parallel()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "t"))
	require.NoError(t, err)
	sink, err := kafkasink.Dial(c.ListenAddrs(), kafkasink.Options{PublishTimeout: 2 * time.Second})
	require.NoError(t, err)
	defer sink.Close()
	require.NoError(t, sink.Publish(context.Background(), []outbox.Entry{entry("a", "t", "k", "x")})[0])
	c.Close()
	err = sink.Publish(context.Background(), []outbox.Entry{entry("b", "t", "k", "y")})[0]
	require.Error(t, err)
	assert.Equal(t, backoff.ClassSemiTransient, backoff.ClassOf(err), "%v", err)
}

func TestContextCancellation(t *testing.T) {
	t.Parallel()
	t.Run("AlreadyCancelled", func(t *testing.T) {
		t.Parallel()
		c := newCluster(t, 1, []string{"t"})
		sink, err := kafkasink.New(newClient(t, c), kafkasink.Options{})
		require.NoError(t, err)
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		for _, err := range sink.Publish(ctx, entries(3, "t", func(i int) string { return strconv.Itoa(i) })) {
			assert.Equal(t, context.Canceled, err, "the caller's context error comes back as it is")
		}
	})
	t.Run("WhileWaiting", func(t *testing.T) {
		t.Parallel()
		cl, err := kgo.NewClient(kgo.SeedBrokers(deadAddr(t)))
		require.NoError(t, err)
		defer cl.Close()
		sink, err := kafkasink.New(cl, kafkasink.Options{PublishTimeout: -1})
		require.NoError(t, err)
		ctx, cancel := context.WithCancel(context.Background())
		time.AfterFunc(200*time.Millisecond, cancel)
		for _, err := range sink.Publish(ctx, entries(3, "t", func(i int) string { return strconv.Itoa(i) })) {
			assert.Equal(t, context.Canceled, err)
		}
	})
	t.Run("CallerDeadline", func(t *testing.T) {
		t.Parallel()
		cl, err := kgo.NewClient(kgo.SeedBrokers(deadAddr(t)))
		require.NoError(t, err)
		defer cl.Close()
		sink, err := kafkasink.New(cl, kafkasink.Options{})
		require.NoError(t, err)
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel()
		err = sink.Publish(ctx, []outbox.Entry{entry("a", "t", "k", "x")})[0]
		assert.Equal(t, context.DeadlineExceeded, err)
		assert.Equal(t, backoff.ClassSemiTransient, backoff.ClassOf(err))
	})
}

func TestClassify(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		err  error
		want backoff.Class
	}{
		{nil, backoff.ClassTransient},
		{errors.New("boom"), backoff.ClassTransient},
		{context.Canceled, backoff.ClassTransient},
		{context.DeadlineExceeded, backoff.ClassSemiTransient},
		{fmt.Errorf("%w, last err: %w", kgo.ErrRecordTimeout, kerr.NotLeaderForPartition), backoff.ClassSemiTransient},
		{kgo.ErrRecordRetries, backoff.ClassTransient},
		{kgo.ErrClientClosed, backoff.ClassSemiTransient},
		{&net.OpError{Op: "dial", Err: errors.New("connection refused")}, backoff.ClassSemiTransient},
		{kerr.NotLeaderForPartition, backoff.ClassTransient},
		{kerr.UnknownTopicOrPartition, backoff.ClassTransient},
		{fmt.Errorf("wrapped: %w", kerr.TopicAuthorizationFailed), backoff.ClassPermanent},
		{kerr.SaslAuthenticationFailed, backoff.ClassSemiTransient},
		{backoff.Permanent(errors.New("marked")), backoff.ClassPermanent},
		{backoff.Transient(kerr.MessageTooLarge), backoff.ClassTransient},
	} {
		assert.Equal(t, tc.want, kafkasink.Classify(tc.err), "%v", tc.err)
	}
}
