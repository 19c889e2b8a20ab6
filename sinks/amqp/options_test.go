package amqpsink_test

import (
	"context"
	"errors"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/outboxrelay/outbox"
	"github.com/outboxrelay/outbox/backoff"
	amqpsink "github.com/outboxrelay/outbox/sinks/amqp"
)

func TestDialRejectsBadOptionsNamingThem(t *testing.T) {
	t.Parallel()
	named := func(o string) string { return "--amqp-" + o }
	for _, tc := range []struct {
		opts amqpsink.Options
		want string
	}{
		{amqpsink.Options{LandingBound: -time.Second}, "Options.LandingBound"},
		{amqpsink.Options{RoutingKey: func(outbox.Entry) string { return "" }, RoutingKeyTemplate: "{key}"}, "Options.RoutingKeyTemplate"},
		{amqpsink.Options{RoutingKeyTemplate: "fixed"}, "no placeholder"},
		{amqpsink.Options{Channels: -1}, "Options.Channels"},
		{amqpsink.Options{MaxPending: -1}, "Options.MaxPending"},
		{amqpsink.Options{CloseTimeout: -1}, "Options.CloseTimeout"},
		{amqpsink.Options{ReconnectDelay: -1}, "Options.ReconnectDelay"},
		{amqpsink.Options{Channels: -1, OptionName: named}, "--amqp-Channels"},
	} {
		_, err := amqpsink.Dial("amqp://guest:guest@127.0.0.1:1/", tc.opts)
		require.Error(t, err)
		assert.Contains(t, err.Error(), tc.want)
		assert.Contains(t, err.Error(), "amqpsink: ")
	}
	_, err := amqpsink.Dial("amqp://guest:guest@127.0.0.1:1/", amqpsink.Options{}, amqp.Config{Recovery: &amqp.Recovery{}})
	require.ErrorContains(t, err, "Recovery")
}

func TestDialErrorsHideThePassword(t *testing.T) {
	t.Parallel()
	_, err := amqpsink.Dial("amqp://relay:Sup3rSecret@127.0.0.1:1/vh", amqpsink.Options{})
	require.Error(t, err)
	assert.NotContains(t, err.Error(), "Sup3rSecret")
	assert.Contains(t, err.Error(), "relay:xxxxx@127.0.0.1:1")
	_, err = amqpsink.Dial("amqp://relay:Sup3rSecret@127.0.0.1:notaport/vh", amqpsink.Options{})
	require.Error(t, err)
	assert.NotContains(t, err.Error(), "Sup3rSecret")
}

func TestRoutingKeyTemplateAndExchangeMapping(t *testing.T) {
	t.Parallel()
	url := brokerURL(t)
	tp := newTopo(t, url)
	s := dialSink(t, url, amqpsink.Options{
		Exchange:           func(outbox.Entry) string { return tp.exchange },
		RoutingKeyTemplate: "{topic}.{key}.{id}",
	})
	e := outbox.Entry{ID: "id1", Topic: "orders", Key: "k9", Payload: []byte("x")}
	require.NoError(t, s.Publish(ctxT(t), []outbox.Entry{e})[0])
	d := tp.read(1)[0]
	assert.Equal(t, tp.exchange, d.Exchange)
	assert.Equal(t, "orders.k9.id1", d.RoutingKey)
}

func TestLandingBound(t *testing.T) {
	t.Parallel()
	url := brokerURL(t)
	s := dialSink(t, url, amqpsink.Options{})
	assert.Equal(t, amqpsink.DefaultCloseTimeout+2*amqpsink.DefaultHeartbeat+time.Second, s.LandingBound(), "2s + 2 x 3s + 1s")
	s = dialSink(t, url, amqpsink.Options{CloseTimeout: time.Second})
	assert.Equal(t, 8*time.Second, s.LandingBound())
	s = dialSink(t, url, amqpsink.Options{LandingBound: 42 * time.Second})
	assert.Equal(t, 42*time.Second, s.LandingBound())
	s, err := amqpsink.Dial(url+"?heartbeat=0", amqpsink.Options{})
	require.NoError(t, err)
	defer s.Close()
	// heartbeat=0 leaves the interval to the broker (60s by default):
	// the bound grows with it.
	h := (s.LandingBound() - amqpsink.DefaultCloseTimeout - time.Second) / 2
	assert.Greater(t, h, amqpsink.DefaultHeartbeat, "the broker's heartbeat")
	assert.Zero(t, h%time.Second, "a whole number of seconds, as AMQP negotiates it: %v", h)
}

func TestPublishAfterCloseFailsWithErrClosed(t *testing.T) {
	t.Parallel()
	url := brokerURL(t)
	tp := newTopo(t, url)
	s := dialSink(t, url, amqpsink.Options{})
	require.NoError(t, s.Close())
	require.NoError(t, s.Close(), "Close twice")
	errs := s.Publish(context.Background(), entries(tp.exchange, 2, func(int) string { return "k" }))
	for _, err := range errs {
		require.ErrorIs(t, err, outbox.ErrClosed)
	}
	require.ErrorIs(t, s.Ping(context.Background()), outbox.ErrClosed)
	assert.Equal(t, 0, tp.count())
	assert.Empty(t, s.Publish(context.Background(), nil))
}

func TestFailingAndPing(t *testing.T) {
	t.Parallel()
	url := brokerURL(t)
	tp := newTopo(t, url)
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	s := dialSink(t, url, amqpsink.Options{Now: func() time.Time { return now }})
	require.NoError(t, s.Ping(ctxT(t)))
	since, last := s.Failing()
	assert.True(t, since.IsZero())
	assert.NoError(t, last)
	// A call whose every entry fails (unroutable) makes it fail since now.
	errs := s.Publish(ctxT(t), []outbox.Entry{{ID: "x", Topic: "amq.direct", Key: uniq("nobody")}})
	require.Error(t, errs[0])
	since, last = s.Failing()
	assert.Equal(t, now, since)
	assert.ErrorIs(t, last, amqpsink.ErrUnroutable)
	// A confirmed entry clears it.
	require.NoError(t, s.Publish(ctxT(t), entries(tp.exchange, 1, func(int) string { return "k" }))[0])
	since, _ = s.Failing()
	assert.True(t, since.IsZero())
}

func TestClassify(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		err  error
		want backoff.Class
	}{
		{&amqp.Error{Code: amqp.NotFound}, backoff.ClassPermanent},
		{&amqp.Error{Code: amqp.AccessRefused}, backoff.ClassPermanent},
		{&amqp.Error{Code: amqp.PreconditionFailed}, backoff.ClassPermanent},
		{&amqp.Error{Code: amqp.ConnectionForced}, backoff.ClassTransient},
		{&amqp.Error{Code: amqp.InternalError}, backoff.ClassTransient},
		{amqp.ErrClosed, backoff.ClassTransient},
		{amqpsink.ErrUnroutable, backoff.ClassPermanent},
		{amqpsink.ErrConnectionLost, backoff.ClassTransient},
		{amqpsink.ErrNacked, backoff.ClassTransient},
		{amqpsink.ErrBlocked, backoff.ClassTransient},
		{context.DeadlineExceeded, backoff.ClassSemiTransient},
		{context.Canceled, backoff.ClassTransient},
		{backoff.Permanent(errors.New("x")), backoff.ClassPermanent},
	} {
		assert.Equal(t, tc.want, amqpsink.Classify(tc.err), "%v", tc.err)
	}
}

// TestLandingUnboundedWithoutHeartbeats: when neither side asks for
// heartbeats, nothing makes the broker drop a connection it no longer
// hears from, so a publish still on its way can land any time later.
func TestLandingUnboundedWithoutHeartbeats(t *testing.T) {
	t.Parallel()
	n := privateNode(t)
	s := dialSink(t, n.URL()+"?heartbeat=0", amqpsink.Options{})
	assert.Equal(t, amqpsink.LandingUnbounded, s.LandingBound())
	s = dialSink(t, n.URL(), amqpsink.Options{})
	assert.Equal(t, 9*time.Second, s.LandingBound(), "the sink's own heartbeat (3s) applies")
}
