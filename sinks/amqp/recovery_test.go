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
