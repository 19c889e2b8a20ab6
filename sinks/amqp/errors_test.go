package amqpsink_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/outboxrelay/outbox"
	"github.com/outboxrelay/outbox/backoff"
	amqpsink "github.com/outboxrelay/outbox/sinks/amqp"
)

func requireClass(t *testing.T, want backoff.Class, err error, msgAndArgs ...any) {
	t.Helper()
	require.Error(t, err, msgAndArgs...)
	require.Equal(t, want, backoff.ClassOf(err), "class of %v", err)
}

// TestUnroutableIsPermanentNamingExchangeAndRoutingKey: a mandatory
// publish to an exchange with no queue bound for its routing key comes
// back (basic.return) and fails permanently, naming the exchange, the
// routing key and the fixes; the routable entry of the same call is
// confirmed. An alternate exchange then takes it.
func TestUnroutableIsPermanentNamingExchangeAndRoutingKey(t *testing.T) {
	t.Parallel()
	url := brokerURL(t)
	tp := newTopo(t, url)
	lonely := uniq("lonely")
	require.NoError(t, tp.ch.ExchangeDeclare(lonely, "direct", false, true, false, false, nil))
	s := dialSink(t, url, amqpsink.Options{Channels: 1})
	es := []outbox.Entry{
		{ID: outbox.NewID(), Topic: lonely, Key: "nobody-listens", Payload: []byte("a")},
		{ID: outbox.NewID(), Topic: tp.exchange, Key: "k", Payload: []byte("b")},
	}
	errs := s.Publish(ctxT(t), es)
	requireClass(t, backoff.ClassPermanent, errs[0])
	assert.ErrorIs(t, errs[0], amqpsink.ErrUnroutable)
	for _, want := range []string{lonely, "nobody-listens", "NO_ROUTE", "bind a queue", "alternate exchange"} {
		assert.Contains(t, errs[0].Error(), want)
	}
	require.NoError(t, errs[1])
	assert.Equal(t, es[1].ID, tp.read(1)[0].MessageId)
	assert.Equal(t, 0, tp.count(), "the returned message is not in the queue")

	// The fix the error names: an alternate exchange.
	withAE := uniq("with-ae")
	require.NoError(t, tp.ch.ExchangeDeclare(withAE, "direct", false, true, false, false, amqp.Table{"alternate-exchange": tp.exchange}))
	es[0].Topic = withAE
	require.NoError(t, s.Publish(ctxT(t), es[:1])[0])
	assert.Equal(t, es[0].ID, tp.read(1)[0].MessageId)
}

// TestMissingExchangeIsPermanentOthersRetryable: a publish to an exchange
// that does not exist closes the channel (404 NOT_FOUND); that entry fails
// permanently with the fix, the other entries of the call on that channel
// fail retryably or are confirmed (and then are in the queue), and the
// sink opens a new channel for the next call.
func TestMissingExchangeIsPermanentOthersRetryable(t *testing.T) {
	t.Parallel()
	url := brokerURL(t)
	tp := newTopo(t, url)
	missing := uniq("missing")
	s := dialSink(t, url, amqpsink.Options{Channels: 1})
	es := entries(tp.exchange, 9, func(i int) string { return string(rune('a' + i)) })
	es[4].Topic = missing
	errs := s.Publish(ctxT(t), es)
	requireClass(t, backoff.ClassPermanent, errs[4])
	for _, want := range []string{missing, "does not exist", "declare it", "Options.Exchange", "NOT_FOUND"} {
		assert.Contains(t, errs[4].Error(), want)
	}
	var ok, retry []outbox.Entry
	for i, err := range errs {
		switch {
		case i == 4:
		case err == nil:
			ok = append(ok, es[i])
		default:
			assert.NotEqual(t, backoff.ClassPermanent, backoff.ClassOf(err), "entry %d: %v", i, err)
			assert.ErrorIs(t, err, amqpsink.ErrConnectionLost)
			retry = append(retry, es[i])
		}
	}
	assert.NotEmpty(t, retry, "the entries published after the failing one on its channel were dropped by the broker")
	// Those confirmed are in the queue; of those that failed, the ones
	// after the culprit are not (the broker dropped them with the channel);
	// the ones before it may be (routed, their confirms lost).
	got := tp.read(len(ok))
	got = append(got, tp.drain()...)
	checkWrittenInOrder(t, es, errs, got, 4)
	for i, err := range s.Publish(ctxT(t), retry) {
		require.NoError(t, err, "retry %d on a new channel", i)
	}
	tp.read(len(retry))
}

// TestInternalExchangeIsPermanent: publishing to an internal exchange is
// refused (403 ACCESS_REFUSED) and permanent, naming the exchange.
func TestInternalExchangeIsPermanent(t *testing.T) {
	t.Parallel()
	url := brokerURL(t)
	tp := newTopo(t, url)
	internal := uniq("internal")
	require.NoError(t, tp.ch.ExchangeDeclare(internal, "topic", false, true, true, false, nil))
	s := dialSink(t, url, amqpsink.Options{OptionName: func(o string) string {
		return map[string]string{"Exchange": "--exchange-map"}[o]
	}})
	err := s.Publish(ctxT(t), []outbox.Entry{{ID: outbox.NewID(), Topic: internal, Key: "k"}})[0]
	requireClass(t, backoff.ClassPermanent, err)
	assert.Contains(t, err.Error(), internal)
	assert.Contains(t, err.Error(), "ACCESS_REFUSED")
	assert.Contains(t, err.Error(), "permission")
	assert.Contains(t, err.Error(), "--exchange-map", "the option as OptionName names it")
}

// TestWriteRefusedIsPermanent: a user without write permission on the
// exchange gets 403 ACCESS_REFUSED, permanent, naming the exchange and
// the permission to grant. The password appears in no error.
func TestWriteRefusedIsPermanent(t *testing.T) {
	t.Parallel()
	n := privateNode(t)
	ctx := ctxT(t)
	user, pass := uniq("relay"), "S3cret-"+uniq("pw")
	_, err := n.Ctl(ctx, "add_user", user, pass)
	require.NoError(t, err)
	t.Cleanup(func() { _, _ = n.Ctl(context.Background(), "delete_user", user) })
	_, err = n.Ctl(ctx, "set_permissions", "-p", "/", user, ".*", "^allowed-.*", ".*")
	require.NoError(t, err)
	tp := newTopo(t, n.URL())
	url := strings.Replace(n.URL(), "guest:guest", user+":"+pass, 1)
	s := dialSink(t, url, amqpsink.Options{})
	err = s.Publish(ctx, []outbox.Entry{{ID: outbox.NewID(), Topic: tp.exchange, Key: "k"}})[0]
	requireClass(t, backoff.ClassPermanent, err)
	assert.Contains(t, err.Error(), tp.exchange)
	assert.Contains(t, err.Error(), "set_permissions")
	assert.NotContains(t, err.Error(), pass)

	_, err = amqpsink.Dial(strings.Replace(url, pass, pass+"-wrong", 1), amqpsink.Options{})
	require.Error(t, err)
	assert.NotContains(t, err.Error(), pass)
	assert.Contains(t, err.Error(), "xxxxx", "the URL in the error is redacted")
}

// TestTooLargeIsPermanent: a message over the broker's max_message_size
// closes the channel (406 PRECONDITION_FAILED); the entry fails
// permanently naming the limit, and an entry of another key in the same
// call does not fail permanently.
func TestTooLargeIsPermanent(t *testing.T) {
	t.Parallel()
	n := privateNode(t)
	tp := newTopo(t, n.URL())
	s := dialSink(t, n.URL(), amqpsink.Options{Channels: 1})
	es := entries(tp.exchange, 3, func(i int) string { return string(rune('a' + i)) })
	es[1].Payload = make([]byte, nodeMaxMessageSize+1)
	errs := s.Publish(ctxT(t), es)
	requireClass(t, backoff.ClassPermanent, errs[1])
	for _, want := range []string{"max_message_size", strconv.Itoa(nodeMaxMessageSize), "shrink the payload", "PRECONDITION_FAILED"} {
		assert.Contains(t, errs[1].Error(), want)
	}
	for _, i := range []int{0, 2} {
		if errs[i] != nil {
			assert.NotEqual(t, backoff.ClassPermanent, backoff.ClassOf(errs[i]), "entry %d: %v", i, errs[i])
		}
	}
	es[1].Payload = []byte("small")
	for i, err := range s.Publish(ctxT(t), es) {
		require.NoError(t, err, "entry %d again", i)
	}
}

// TestNackIsTransient: a queue at its x-max-length with x-overflow
// reject-publish makes the broker nack the message: transient.
func TestNackIsTransient(t *testing.T) {
	t.Parallel()
	url := brokerURL(t)
	tp := newTopo(t, url)
	full := uniq("full")
	_, err := tp.ch.QueueDeclare(full, false, true, false, false, amqp.Table{"x-max-length": 1, "x-overflow": "reject-publish"})
	require.NoError(t, err)
	require.NoError(t, tp.ch.QueueBind(full, "full.#", tp.exchange, false, nil))
	s := dialSink(t, url, amqpsink.Options{RoutingKeyTemplate: "full.{key}"})
	errs := s.Publish(ctxT(t), entries(tp.exchange, 1, func(int) string { return "a" }))
	require.NoError(t, errs[0])
	errs = s.Publish(ctxT(t), entries(tp.exchange, 1, func(int) string { return "b" }))
	requireClass(t, backoff.ClassTransient, errs[0])
	assert.True(t, errors.Is(errs[0], amqpsink.ErrNacked), "%v", errs[0])
}

// TestRoutingKeyOverAMQPLimitIsPermanent: AMQP carries routing keys and
// header names of up to 255 bytes (an entry key may be longer): such an
// entry fails permanently, naming the option that maps keys, and the
// connection stays usable.
func TestRoutingKeyOverAMQPLimitIsPermanent(t *testing.T) {
	t.Parallel()
	url := brokerURL(t)
	tp := newTopo(t, url)
	s := dialSink(t, url, amqpsink.Options{Channels: 1})
	es := entries(tp.exchange, 2, func(int) string { return "k" })
	es[0].Key = strings.Repeat("k", 256)
	errs := s.Publish(ctxT(t), es)
	requireClass(t, backoff.ClassPermanent, errs[0])
	assert.Contains(t, errs[0].Error(), "255")
	assert.Contains(t, errs[0].Error(), "Options.RoutingKey")
	require.NoError(t, errs[1])
	assert.Equal(t, es[1].ID, tp.read(1)[0].MessageId)

	es[1].Headers = map[string]string{strings.Repeat("h", 256): "v"}
	err := s.Publish(ctxT(t), es[1:])[0]
	requireClass(t, backoff.ClassPermanent, err)
	assert.Contains(t, err.Error(), "header name")
}
