package natssink_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/outboxrelay/outbox"
	"github.com/outboxrelay/outbox/backoff"
	natssink "github.com/outboxrelay/outbox/sinks/nats"
)

// TestLandingBound: what LandingBound reports for each kind of connection.
func TestLandingBound(t *testing.T) {
	t.Parallel()
	url := embeddedURL(t)
	dial := func(o natssink.Options, nopts ...nats.Option) time.Duration {
		s, err := natssink.Dial(url, o, nopts...)
		require.NoError(t, err)
		defer s.Close()
		return s.LandingBound()
	}
	newSink := func(o natssink.Options, nopts ...nats.Option) time.Duration {
		s, err := natssink.New(connect(t, url, nopts...), o)
		require.NoError(t, err)
		defer s.Close()
		return s.LandingBound()
	}
	// Dial: FlusherTimeout (5s) + PublishTimeout.
	require.Equal(t, 10*time.Second, dial(natssink.Options{}))
	require.Equal(t, 7*time.Second, dial(natssink.Options{PublishTimeout: 2 * time.Second}))
	require.Equal(t, 3*time.Second, dial(natssink.Options{PublishTimeout: 2 * time.Second}, nats.FlusherTimeout(time.Second)))
	// A reconnect buffer, or no flusher timeout: unbounded.
	require.Equal(t, natssink.LandingUnbounded, dial(natssink.Options{}, nats.ReconnectBufSize(1<<20)))
	require.Equal(t, natssink.LandingUnbounded, dial(natssink.Options{}, nats.FlusherTimeout(0)))
	// New: nats.go's defaults buffer while reconnecting.
	require.Equal(t, natssink.LandingUnbounded, newSink(natssink.Options{}))
	require.Equal(t, 8*time.Second, newSink(natssink.Options{}, nats.ReconnectBufSize(-1), nats.FlusherTimeout(3*time.Second)))
	// Declared.
	require.Equal(t, 42*time.Second, newSink(natssink.Options{LandingBound: 42 * time.Second}))
	require.Equal(t, 42*time.Second, dial(natssink.Options{LandingBound: 42 * time.Second}))
}

// TestOptionsRejected: invalid options fail New and Dial with an error
// naming the option (as OptionName says).
func TestOptionsRejected(t *testing.T) {
	t.Parallel()
	url := embeddedURL(t)
	name := func(o string) string { return "--nats-" + strings.ToLower(o) }
	for _, c := range []struct {
		opts natssink.Options
		want string
	}{
		{natssink.Options{LandingBound: -time.Second}, "--nats-landingbound"},
		{natssink.Options{PublishTimeout: -time.Second}, "--nats-publishtimeout"},
		{natssink.Options{MaxPending: -1}, "--nats-maxpending"},
	} {
		c.opts.OptionName = name
		_, err := natssink.Dial(url, c.opts)
		require.ErrorContains(t, err, c.want)
		require.ErrorContains(t, err, "natssink: ")
		_, err = natssink.New(connect(t, url), c.opts)
		require.ErrorContains(t, err, c.want)
	}
	_, err := natssink.New(nil, natssink.Options{})
	require.ErrorContains(t, err, "non-nil *nats.Conn")
	_, err = natssink.Dial(" ", natssink.Options{})
	require.ErrorContains(t, err, "needs a server URL")
}

// TestDialErrorHidesThePassword: a URL's password, or its token, is not
// in Dial's error.
func TestDialErrorHidesThePassword(t *testing.T) {
	t.Parallel()
	for _, u := range []string{"nats://user:s3cr3t@127.0.0.1:1", "nats://s3cr3t@127.0.0.1:1", "nats://127.0.0.1:1,nats://u:s3cr3t@127.0.0.1:2"} {
		_, err := natssink.Dial(u, natssink.Options{}, nats.Timeout(time.Second))
		require.Error(t, err)
		require.NotContains(t, err.Error(), "s3cr3t")
		require.ErrorContains(t, err, "127.0.0.1:1")
		require.ErrorContains(t, err, "check that nats-server runs there")
	}
}

// TestDialDoesNotBufferWhileDisconnected: what is published while the
// connection is down fails at once (transient) and is never sent later:
// after the connection is back, a marker published and acknowledged is
// the only message in the stream (nats.go sends what it buffered before
// anything published after the reconnect).
func TestDialDoesNotBufferWhileDisconnected(t *testing.T) {
	t.Parallel()
	p := newProxied(t, embeddedURL(t), "NOBUF", natssink.Options{})
	p.down(t)
	errs := p.sink.Publish(context.Background(), []outbox.Entry{p.entry("d1", ""), p.entry("d2", "k")})
	for _, err := range errs {
		require.Equal(t, backoff.ClassTransient, backoff.ClassOf(err), "%v", err)
		require.ErrorIs(t, err, nats.ErrReconnectBufExceeded)
	}
	p.heal(t)
	require.NoError(t, publishOne(t, p.sink, p.entry("marker", "")))
	require.Equal(t, []string{"marker"}, ids(readAll(t, p.st)))
}

// TestMaxPendingBoundsWhatIsInFlight: with MaxPending 2 and the server's
// acknowledgements held, the stream gets two messages of the six
// (distinct keys) and no more until acknowledgements come back; then all.
func TestMaxPendingBoundsWhatIsInFlight(t *testing.T) {
	t.Parallel()
	p := newProxied(t, embeddedURL(t), "PENDING", natssink.Options{MaxPending: 2, PublishTimeout: time.Minute})
	var msgs []outbox.Entry
	for _, id := range []string{"p1", "p2", "p3", "p4", "p5", "p6"} {
		msgs = append(msgs, p.entry(id, id))
	}
	p.proxy.HoldReplies()
	done := make(chan []error, 1)
	go func() { done <- p.sink.Publish(context.Background(), msgs) }()
	p.waitStored(t, 2)
	time.Sleep(time.Second) // a third message, wrongly sent, would land by now
	require.Len(t, readAll(t, p.st), 2, "in flight with MaxPending 2")
	p.proxy.Heal()
	for i, err := range <-done {
		require.NoError(t, err, msgs[i].ID)
	}
	require.Len(t, readAll(t, p.st), 6)
}

// TestFailingAndPing: Failing reports a sink whose every publish fails
// since the first such call, on the sink's clock, and clears on the next
// acknowledged one; Ping fails while the server is unreachable.
func TestFailingAndPing(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	p := newProxied(t, embeddedURL(t), "FAILING", natssink.Options{Now: clock, PublishTimeout: time.Second})
	sink := p.sink
	ctx := context.Background()
	require.NoError(t, sink.Ping(ctx))
	require.NoError(t, publishOne(t, sink, p.entry("ok1", "")))
	since, last := sink.Failing()
	require.True(t, since.IsZero())
	require.NoError(t, last)

	p.down(t)
	require.ErrorContains(t, sink.Ping(ctx), "natssink: ping")
	require.Error(t, publishOne(t, sink, p.entry("f1", "")))
	first := clock()
	mu.Lock()
	now = now.Add(time.Minute)
	mu.Unlock()
	require.Error(t, publishOne(t, sink, p.entry("f2", "")))
	since, last = sink.Failing()
	require.Equal(t, first, since)
	require.ErrorContains(t, last, "f2")
	// A call ended by its own context is not a failure of publishing.
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	sink.Publish(cctx, []outbox.Entry{p.entry("c1", "")})
	since2, _ := sink.Failing()
	require.Equal(t, first, since2)

	p.heal(t)
	require.NoError(t, publishOne(t, sink, p.entry("ok2", "")))
	since, last = sink.Failing()
	require.True(t, since.IsZero())
	require.NoError(t, last)
	require.NoError(t, sink.Ping(ctx))
}

// TestCloseKeepsTheCallersConnection: Close of a sink New made leaves the
// caller's connection open and usable; Close of one Dial made closes its
// own. Publish after Close sends nothing (transient errors).
func TestCloseKeepsTheCallersConnection(t *testing.T) {
	t.Parallel()
	server := embeddedURL(t)
	nc := connect(t, server)
	s, err := natssink.New(nc, natssink.Options{})
	require.NoError(t, err)
	require.Same(t, nc, s.Conn())
	require.NoError(t, s.Close())
	require.NoError(t, s.Close())
	require.True(t, nc.IsConnected())
	err = s.Publish(context.Background(), []outbox.Entry{{ID: "after", Topic: "x"}})[0]
	require.Equal(t, backoff.ClassTransient, backoff.ClassOf(err), "%v", err)
	require.ErrorContains(t, err, "closed")

	d, err := natssink.Dial(server, natssink.Options{})
	require.NoError(t, err)
	require.NoError(t, d.Close())
	require.True(t, d.Conn().IsClosed())
}

// TestDialDefaults: the connection Dial builds does not buffer while
// reconnecting, bounds a blocked write by 5s, reconnects every 250ms for
// ever, and is named; options given to Dial override them.
func TestDialDefaults(t *testing.T) {
	t.Parallel()
	s, err := natssink.Dial(embeddedURL(t), natssink.Options{})
	require.NoError(t, err)
	defer s.Close()
	o := s.Conn().Opts
	require.Equal(t, -1, o.ReconnectBufSize)
	require.Equal(t, 5*time.Second, o.FlusherTimeout)
	require.Equal(t, -1, o.MaxReconnect)
	require.Equal(t, 250*time.Millisecond, o.ReconnectWait)
	require.Equal(t, "outbox-relay", o.Name)
	s2, err := natssink.Dial(embeddedURL(t), natssink.Options{}, nats.Name("mine"), nats.MaxReconnects(3))
	require.NoError(t, err)
	defer s2.Close()
	require.Equal(t, "mine", s2.Conn().Opts.Name)
	require.Equal(t, 3, s2.Conn().Opts.MaxReconnect)
}
