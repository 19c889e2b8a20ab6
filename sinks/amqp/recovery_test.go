package amqpsink_test

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/outboxrelay/outbox"
	"github.com/outboxrelay/outbox/backoff"
	amqpsink "github.com/outboxrelay/outbox/sinks/amqp"
)

// localAddrs is an amqp.Config.Dial that remembers the local address of
// every connection it makes, by which rabbitmqctl names them.
type localAddrs struct {
	mu    sync.Mutex
	addrs []string
}

func (l *localAddrs) dial(network, addr string) (net.Conn, error) {
	c, err := net.DialTimeout(network, addr, 5*time.Second)
	if err == nil {
		l.mu.Lock()
		l.addrs = append(l.addrs, c.LocalAddr().String())
		l.mu.Unlock()
	}
	return c, err
}

func (l *localAddrs) last() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.addrs[len(l.addrs)-1]
}

// TestRecoversAfterTheServerClosesTheConnection closes the sink's
// connection from the broker (rabbitmqctl close_connection: 320
// CONNECTION_FORCED) while calls publish: every entry reported published
// is in the queue, every failure is retryable, and the sink reconnects by
// itself so that publishing goes on; each key's first deliveries stay in
// order when the failed entries are published again, as the relay does.
func TestRecoversAfterTheServerClosesTheConnection(t *testing.T) {
	t.Parallel()
	n := privateNode(t)
	tp := newTopo(t, n.URL())
	dials := &localAddrs{}
	s, err := amqpsink.Dial(n.URL(), amqpsink.Options{}, amqp.Config{Dial: dials.dial})
	require.NoError(t, err)
	defer s.Close()
	first := dials.last()

	var published atomic.Int64
	var failures atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 2 {
		wg.Go(func() {
			// One key per worker: a call publishes the key's next entries,
			// and after a failure publishes again from the first failed one,
			// as the relay does.
			key := fmt.Sprintf("w%d", w)
			next := 0
			for {
				select {
				case <-stop:
					return
				default:
				}
				var es []outbox.Entry
				for i := range 20 {
					es = append(es, outbox.Entry{ID: fmt.Sprintf("%s-%d", key, next+i), Topic: tp.exchange, Key: key, Payload: []byte(strconv.Itoa(next + i))})
				}
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				errs := s.Publish(ctx, es)
				cancel()
				for _, err := range errs {
					if err != nil {
						assert.NotEqual(t, backoff.ClassPermanent, backoff.ClassOf(err), "%v", err)
						failures.Add(1)
						break
					}
					next++
					published.Add(1)
				}
			}
		})
	}
	waitFor(t, func() bool { return published.Load() > 200 }, "publishing before the close")
	require.NoError(t, n.closeConnection(first))
	waitFor(t, func() bool {
		dials.mu.Lock()
		defer dials.mu.Unlock()
		return len(dials.addrs) > 1
	}, "a new connection")
	after := published.Load()
	waitFor(t, func() bool { return published.Load() > after+200 }, "publishing after the reconnection")
	close(stop)
	wg.Wait()
	t.Logf("published %d entries, %d calls failed", published.Load(), failures.Load())

	got := tp.read(int(published.Load()))
	got = append(got, tp.drain()...)
	seen := map[string]bool{}
	next := map[string]int{}
	for _, d := range got {
		if seen[d.MessageId] {
			continue
		}
		seen[d.MessageId] = true
		v, _ := strconv.Atoi(string(d.Body))
		assert.Equal(t, next[d.RoutingKey], v, "key %s: first deliveries out of order", d.RoutingKey)
		next[d.RoutingKey] = v + 1
	}
	assert.GreaterOrEqual(t, len(seen), int(published.Load()))
}

// waitFor polls cond for up to 60s.
func waitFor(t *testing.T, cond func() bool, what string) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestReconnectWaitsBetweenAttempts: while the broker is unreachable,
// Ping fails (transient), and the sink makes no connection attempt sooner
// than ReconnectDelay after a failed one, the delay doubling up to
// MaxReconnectDelay; once the broker is back, Ping and Publish succeed.
// (The bound on attempts holds however slow the machine: slower means
// fewer attempts.)
func TestReconnectWaitsBetweenAttempts(t *testing.T) {
	t.Parallel()
	url := brokerURL(t)
	tp := newTopo(t, url)
	proxy := proxyTo(t, url)
	var attempts atomic.Int64
	dial := func(network, addr string) (net.Conn, error) {
		attempts.Add(1)
		return net.DialTimeout(network, addr, 5*time.Second)
	}
	s, err := amqpsink.Dial("amqp://guest:guest@"+proxy.addr()+"/", amqpsink.Options{ReconnectDelay: 50 * time.Millisecond, MaxReconnectDelay: 400 * time.Millisecond},
		amqp.Config{Dial: dial, Heartbeat: time.Second})
	require.NoError(t, err)
	defer s.Close()
	require.NoError(t, s.Ping(ctxT(t)))

	proxy.refuse()
	attempts.Store(0)
	start := time.Now()
	for time.Since(start) < 2*time.Second {
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		err := s.Ping(ctx)
		cancel()
		if err != nil {
			assert.NotEqual(t, backoff.ClassPermanent, amqpsink.Classify(err))
		}
	}
	// 50, 100, 200, 400, 400, ... ms apart: at most about 8 attempts in
	// 2s (a fixed 50ms delay would allow 40).
	assert.LessOrEqual(t, attempts.Load(), int64(10), "connection attempts while the broker was unreachable")
	assert.Positive(t, attempts.Load())
	t.Logf("%d connection attempts in %v", attempts.Load(), time.Since(start).Round(time.Millisecond))

	proxy.heal()
	waitFor(t, func() bool { return s.Ping(ctxT(t)) == nil }, "a new connection")
	require.NoError(t, s.Publish(ctxT(t), entries(tp.exchange, 1, func(int) string { return "k" }))[0])
}

// stallCase is a sink that connects through a fault proxy, with short
// timeouts, and has published one entry of key "warm" (so that the warm
// key's channel is open).
type stallCase struct {
	tp    *topo
	proxy *faultProxy
	s     *amqpsink.Sink
}

func newStallCase(t *testing.T) *stallCase {
	url := brokerURL(t)
	c := &stallCase{tp: newTopo(t, url), proxy: proxyTo(t, url)}
	var err error
	c.s, err = amqpsink.Dial("amqp://guest:guest@"+c.proxy.addr()+"/?heartbeat=1", amqpsink.Options{
		PublishTimeout: 300 * time.Millisecond, CloseTimeout: 200 * time.Millisecond, ReconnectDelay: 20 * time.Millisecond,
	})
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.s.Close() })
	require.NoError(t, c.s.Publish(ctxT(t), entries(c.tp.exchange, 1, func(int) string { return "warm" }))[0])
	c.tp.read(1)
	return c
}

// healAndCheck ends the stall and checks that the sink publishes again
// and that, past the landing bound, nothing of what it gave up on landed.
func (c *stallCase) healAndCheck(t *testing.T) {
	c.proxy.heal()
	waitFor(t, func() bool { return c.s.Ping(ctxT(t)) == nil }, "a new connection")
	after := entries(c.tp.exchange, 1, func(int) string { return "after" })
	require.NoError(t, c.s.Publish(ctxT(t), after)[0])
	time.Sleep(c.s.LandingBound())
	got := c.tp.read(1)
	got = append(got, c.tp.drain()...)
	require.Len(t, got, 1, "only the entry published after the stall is in the queue")
	assert.Equal(t, after[0].ID, got[0].MessageId)
}

// TestPublishTimeoutDuringStall: with the broker stalled (no byte goes
// through), Publish of messages written and waiting for confirms gives up
// at PublishTimeout (plus CloseTimeout, its wait for the channel's close),
// failing its entries semi-transient with context.DeadlineExceeded; after
// the stall, the sink publishes again, and the entries it gave up on did
// not land.
func TestPublishTimeoutDuringStall(t *testing.T) {
	t.Parallel()
	c := newStallCase(t)
	c.proxy.stall()
	// Of the warm key: on the channel that is open, so each is written
	// (into the stall) and waits for its confirm.
	stalled := entries(c.tp.exchange, 3, func(int) string { return "warm" })
	for _, err := range c.s.Publish(context.Background(), stalled) {
		require.ErrorIs(t, err, context.DeadlineExceeded)
		assert.Equal(t, backoff.ClassSemiTransient, backoff.ClassOf(err))
		assert.Contains(t, err.Error(), "PublishTimeout")
	}
	c.healAndCheck(t)
}

// TestPublishReturnsWhenAWriteBlocks: with the broker stalled and large
// messages, the client's write blocks once the socket buffers are full;
// Publish still returns (it drops the connection CloseTimeout after its
// deadline), failing the entries retryably, and after the stall none of
// them lands while the next publish succeeds.
func TestPublishReturnsWhenAWriteBlocks(t *testing.T) {
	t.Parallel()
	c := newStallCase(t)
	c.proxy.stall()
	big := entries(c.tp.exchange, 64, func(int) string { return "warm" })
	for i := range big {
		big[i].Payload = make([]byte, 512<<10) // 32 MiB in all: more than the socket buffers hold
	}
	done := make(chan []error, 1)
	go func() { done <- c.s.Publish(context.Background(), big) }()
	var errs []error
	select {
	case errs = <-done:
	case <-time.After(time.Minute):
		t.Fatal("Publish did not return while its write was blocked")
	}
	for i, err := range errs {
		require.Error(t, err, "entry %d", i)
		assert.NotEqual(t, backoff.ClassPermanent, backoff.ClassOf(err), "entry %d: %v", i, err)
	}
	c.healAndCheck(t)
}
