package kafkasink_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/outboxrelay/outbox"
	"github.com/outboxrelay/outbox/backoff"
	kafkasink "github.com/outboxrelay/outbox/sinks/kafka"
)

// stall holds the first request of one key a kfake cluster receives (the
// broker has read it but not handled it, as a stalled broker would) until
// release is called; then the cluster handles it normally.
type stall struct {
	held    chan struct{} // closed once the request is held
	handled chan struct{} // closed when it is let go: kfake handles it before any other request
	release func()
}

func stallFirst(t *testing.T, c *kfake.Cluster, key kmsg.Key) *stall {
	s := &stall{held: make(chan struct{}), handled: make(chan struct{})}
	let := make(chan struct{})
	var once sync.Once
	s.release = func() { once.Do(func() { close(let) }) }
	t.Cleanup(s.release) // before the cluster closes (cleanups run last first)
	var taken atomic.Bool
	c.ControlKey(int16(key), func(kmsg.Request) (kmsg.Response, error, bool) {
		if !taken.CompareAndSwap(false, true) {
			return nil, nil, false // not handled: the cluster handles it
		}
		close(s.held)
		c.SleepControl(func() { <-let })
		close(s.handled)
		return nil, nil, false
	})
	return s
}

func (s *stall) isHandled() bool {
	select {
	case <-s.handled:
		return true
	default:
		return false
	}
}

// waitClosed fails the test if ch is not closed within 20s.
func waitClosed(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(20 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
	}
}

// TestPublishReturnsAtDeadline: a broker holds the produce request of a
// record; Publish returns at its context's deadline anyway, reporting the
// record failed, without waiting for the broker. The record is not
// recalled: when the broker handles the request, the record lands, after
// the deadline. With Dial's client, a record this client produces to the
// partition afterwards gets there first and fences the late copy (kgo
// bumped its producer epoch when it cancelled the request).
func TestPublishReturnsAtDeadline(t *testing.T) {
	t.Parallel()
	const deadline = time.Second
	cases := []struct {
		name string
		sink func(t *testing.T, c *kfake.Cluster) *kafkasink.Sink
		// newer: publish e2 (same key) after e1 was given up on and
		// before the broker handles e1's request; want is what the log
		// holds then.
		newer bool
		want  []string
	}{
		{"Dial/StaleRecordLandsLate", dialSink, false, []string{"e1"}},
		{"Dial/NewerRecordOfTheClientFencesIt", dialSink, true, []string{"e2"}},
		{"CallerClientWithKgoDefaults/StaleRecordLandsLate", func(t *testing.T, c *kfake.Cluster) *kafkasink.Sink {
			s, err := kafkasink.New(newClient(t, c), kafkasink.Options{})
			require.NoError(t, err)
			return s
		}, false, []string{"e1"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := newCluster(t, 1, []string{"t"})
			held := stallFirst(t, c, kmsg.Produce)
			sink := tc.sink(t, c)

			ctx, cancel := context.WithTimeout(context.Background(), deadline)
			defer cancel()
			due, _ := ctx.Deadline()
			start := time.Now()
			errs := sink.Publish(ctx, []outbox.Entry{entry("e1", "t", "k", "1")})
			returned := time.Now()
			waitClosed(t, held.held, "the held produce request") // it was sent, and is still held
			require.False(t, held.isHandled(), "Publish returned before the broker handled the request")
			assert.Less(t, returned.Sub(start), 3*time.Second, "Publish returns at its deadline, well before the broker answers")
			t.Logf("Publish returned %v after its deadline", returned.Sub(due).Round(10*time.Microsecond))
			require.ErrorIs(t, errs[0], context.DeadlineExceeded)
			assert.Equal(t, backoff.ClassSemiTransient, backoff.ClassOf(errs[0]))

			if tc.newer {
				// The relay would retry; so does the test: the first
				// attempt can meet kgo still failing e1's partition.
				var err error
				for range 5 {
					ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
					err = sink.Publish(ctx, []outbox.Entry{entry("e2", "t", "k", "2")})[0]
					cancel()
					if err == nil {
						break
					}
					t.Logf("e2: %v", err)
				}
				require.NoError(t, err)
				require.False(t, held.isHandled())
			}
			held.release()
			waitClosed(t, held.handled, "the broker to handle the held request")
			var got []string
			for _, r := range consumeQuiet(t, c, []string{"t"}) {
				got = append(got, kafkasink.EntryID(r))
			}
			assert.Equal(t, tc.want, got)
		})
	}
}

func dialSink(t *testing.T, c *kfake.Cluster) *kafkasink.Sink {
	s, err := kafkasink.Dial(c.ListenAddrs(), kafkasink.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// TestLandingBound checks the bound each kind of sink reports.
func TestLandingBound(t *testing.T) {
	t.Parallel()
	c := newCluster(t, 1, []string{"t"})
	addrs := c.ListenAddrs()
	dial := func(opts kafkasink.Options, kopts ...kgo.Opt) (*kafkasink.Sink, error) {
		s, err := kafkasink.Dial(addrs, opts, kopts...)
		if err == nil {
			t.Cleanup(func() { _ = s.Close() })
		}
		return s, err
	}
	newSink := func(opts kafkasink.Options, kopts ...kgo.Opt) (*kafkasink.Sink, error) {
		return kafkasink.New(newClient(t, c, kopts...), opts)
	}
	cancel := kgo.AllowIdempotentProduceCancellation()
	for _, tc := range []struct {
		name  string
		build func() (*kafkasink.Sink, error)
		want  time.Duration
	}{
		{"DialDefaults", func() (*kafkasink.Sink, error) { return dial(kafkasink.Options{}) }, 10 * time.Second},
		{"DialPublishTimeout", func() (*kafkasink.Sink, error) {
			return dial(kafkasink.Options{PublishTimeout: 2 * time.Second})
		}, 7 * time.Second},
		{"DialKgoTimeouts", func() (*kafkasink.Sink, error) {
			return dial(kafkasink.Options{}, kgo.RecordDeliveryTimeout(time.Second),
				kgo.ProduceRequestTimeout(5*time.Second), kgo.RequestTimeoutOverhead(4*time.Second))
		}, 10 * time.Second},
		{"DialNoTimeouts", func() (*kafkasink.Sink, error) {
			return dial(kafkasink.Options{PublishTimeout: -1})
		}, kafkasink.LandingUnbounded},
		{"DialDeliveryTimeoutOnly", func() (*kafkasink.Sink, error) {
			return dial(kafkasink.Options{PublishTimeout: -1}, kgo.RecordDeliveryTimeout(4*time.Second))
		}, 9 * time.Second},
		{"DialDeclared", func() (*kafkasink.Sink, error) {
			return dial(kafkasink.Options{LandingBound: 1500 * time.Millisecond})
		}, 1500 * time.Millisecond},
		{"DialTransactional", func() (*kafkasink.Sink, error) {
			return dial(kafkasink.Options{TransactionalIDPrefix: "lb-"})
		}, 0},
		{"NewKgoDefaults", func() (*kafkasink.Sink, error) { return newSink(kafkasink.Options{}) }, kafkasink.LandingUnbounded},
		{"NewCancellationWithoutDeliveryTimeout", func() (*kafkasink.Sink, error) {
			return newSink(kafkasink.Options{}, cancel)
		}, kafkasink.LandingUnbounded},
		{"NewCancellationAndDeliveryTimeout", func() (*kafkasink.Sink, error) {
			// The caller may produce through the client too, so
			// PublishTimeout does not shorten it: kgo's 10s + 10s.
			return newSink(kafkasink.Options{PublishTimeout: time.Second}, cancel, kgo.RecordDeliveryTimeout(3*time.Second))
		}, 23 * time.Second},
		{"NewDeclared", func() (*kafkasink.Sink, error) {
			return newSink(kafkasink.Options{LandingBound: 4 * time.Second})
		}, 4 * time.Second},
	} {
		s, err := tc.build()
		require.NoError(t, err, tc.name)
		assert.Equal(t, tc.want, s.LandingBound(), tc.name)
	}
	var _ interface{ LandingBound() time.Duration } = (*kafkasink.Sink)(nil)

	_, err := dial(kafkasink.Options{LandingBound: -time.Second})
	require.ErrorContains(t, err, "LandingBound")
	_, err = newSink(kafkasink.Options{LandingBound: -time.Second})
	require.ErrorContains(t, err, "LandingBound")
	_, err = dial(kafkasink.Options{TransactionalIDPrefix: "lb-"}, cancel)
	require.ErrorContains(t, err, "AllowIdempotentProduceCancellation")
}
