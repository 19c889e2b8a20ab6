package kafkasink_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outboxrelay/outbox"
	kafkasink "github.com/outboxrelay/outbox/sinks/kafka"
)

// flagNames is an OptionName as a command with flags sets it; it leaves
// DefaultTopic to the default.
func flagNames(option string) string {
	return map[string]string{
		"UnknownTopicTimeout":             "--unknown-topic-timeout",
		"PublishTimeout":                  "--publish-timeout",
		"Topic":                           "--topic-map",
		kafkasink.OptionAutoTopicCreation: "--auto-create-topics",
	}[option]
}

// TestOptionNames: every message of the sink that names an option names
// it as Options.OptionName says (by default, by its Go name): the
// unknown-topic errors while retried, once parked and with a negative
// timeout, a publish that times out, an entry without a topic.
func TestOptionNames(t *testing.T) {
	t.Parallel()
	c := newCluster(t, 1, []string{"exists"}) // auto-create off
	unknown := func(opts kafkasink.Options, clock *fakeClock, advance time.Duration) (retried, parked string) {
		t.Helper()
		opts.Now = clock.Now
		sink, err := kafkasink.New(newClient(t, c, fastRetry...), opts)
		require.NoError(t, err)
		errs := sink.Publish(context.Background(), []outbox.Entry{entry("a", "missing", "k", "x")})
		require.ErrorIs(t, errs[0], kerr.UnknownTopicOrPartition)
		clock.Advance(advance)
		errs2 := sink.Publish(context.Background(), []outbox.Entry{entry("b", "missing", "k", "x")})
		require.ErrorIs(t, errs2[0], kerr.UnknownTopicOrPartition)
		return errs[0].Error(), errs2[0].Error()
	}
	t.Run("Default", func(t *testing.T) {
		t.Parallel()
		retried, parked := unknown(kafkasink.Options{}, &fakeClock{}, time.Minute)
		for _, msg := range []string{retried, parked} {
			assert.Contains(t, msg, "Options.UnknownTopicTimeout (1m0s)")
			assert.Contains(t, msg, "auto.create.topics.enable and kgo.AllowAutoTopicCreation")
		}
		assert.Contains(t, parked, "has been unknown to the brokers")
	})
	t.Run("Flags", func(t *testing.T) {
		t.Parallel()
		retried, parked := unknown(kafkasink.Options{OptionName: flagNames}, &fakeClock{}, time.Minute)
		for _, msg := range []string{retried, parked} {
			assert.Contains(t, msg, "--unknown-topic-timeout (1m0s)")
			assert.Contains(t, msg, "auto.create.topics.enable and --auto-create-topics")
			assert.NotContains(t, msg, "Options.")
			assert.NotContains(t, msg, "kgo.AllowAutoTopicCreation")
		}
		retried, _ = unknown(kafkasink.Options{OptionName: flagNames, UnknownTopicTimeout: -1}, &fakeClock{}, 0)
		assert.Contains(t, retried, "--unknown-topic-timeout is negative")
	})
	t.Run("PublishTimeout", func(t *testing.T) {
		t.Parallel()
		cl, err := kgo.NewClient(kgo.SeedBrokers(deadAddr(t)))
		require.NoError(t, err)
		defer cl.Close()
		sink, err := kafkasink.New(cl, kafkasink.Options{PublishTimeout: 200 * time.Millisecond, OptionName: flagNames})
		require.NoError(t, err)
		err = sink.Publish(context.Background(), []outbox.Entry{entry("a", "t", "k", "x")})[0]
		require.ErrorIs(t, err, context.DeadlineExceeded)
		assert.Contains(t, err.Error(), "within --publish-timeout 200ms")
	})
	t.Run("NoTopic", func(t *testing.T) {
		t.Parallel()
		sink, err := kafkasink.New(newClient(t, c), kafkasink.Options{OptionName: flagNames})
		require.NoError(t, err)
		err = sink.Publish(context.Background(), []outbox.Entry{{ID: "a"}})[0]
		require.Error(t, err)
		assert.Contains(t, err.Error(), "set Entry.Topic, Options.DefaultTopic or --topic-map")
	})
	t.Run("Validate", func(t *testing.T) {
		t.Parallel()
		_, err := kafkasink.New(newClient(t, c), kafkasink.Options{LandingBound: -1, OptionName: func(o string) string { return "--" + o }})
		require.Error(t, err)
		assert.Contains(t, err.Error(), "--LandingBound is -1ns")
	})
}

// TestFailing: Failing reports since when every publish has failed, with
// the latest error, until a record is acknowledged again; a call that
// acknowledges some records and fails others is no failure.
func TestFailing(t *testing.T) {
	t.Parallel()
	c := newCluster(t, 1, []string{"exists"}) // auto-create off
	clock := &fakeClock{}
	sink, err := kafkasink.New(newClient(t, c, fastRetry...), kafkasink.Options{Now: clock.Now})
	require.NoError(t, err)
	since, last := sink.Failing()
	assert.True(t, since.IsZero(), "a new sink is not failing")
	assert.NoError(t, last)

	ok := sink.Publish(context.Background(), []outbox.Entry{entry("m1", "missing", "k", "x"), entry("e1", "exists", "k2", "y")})
	require.Error(t, ok[0])
	require.NoError(t, ok[1])
	since, _ = sink.Failing()
	assert.True(t, since.IsZero(), "a call with an acknowledged record is no failure")

	start := clock.Now()
	require.Error(t, sink.Publish(context.Background(), []outbox.Entry{entry("m2", "missing", "k", "x")})[0])
	clock.Advance(time.Second)
	require.Error(t, sink.Publish(context.Background(), []outbox.Entry{entry("m3", "missing", "k", "x")})[0])
	since, last = sink.Failing()
	assert.Equal(t, start, since, "failing since the first call that failed whole")
	require.ErrorIs(t, last, kerr.UnknownTopicOrPartition)
	assert.Contains(t, last.Error(), "m3", "the latest call's error")

	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	sink.Publish(cancelled, []outbox.Entry{entry("m4", "missing", "k", "x")})
	since2, _ := sink.Failing()
	assert.Equal(t, start, since2, "a call ended by its context changes nothing")

	require.NoError(t, sink.Publish(context.Background(), []outbox.Entry{entry("e3", "exists", "k2", "y")})[0])
	since, last = sink.Failing()
	assert.True(t, since.IsZero(), "an acknowledged record ends the failing")
	assert.NoError(t, last)
}
