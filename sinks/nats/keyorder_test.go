package natssink_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxrelay/outbox"
	"github.com/outboxrelay/outbox/backoff"
	natssink "github.com/outboxrelay/outbox/sinks/nats"
)

// TestKeysNextEntryWaitsForTheAck: with the server's acknowledgements held
// back (a proxy forwards the sink's messages, and nothing of the server's
// replies), the stream gets the first entry of each key, and nothing more
// of a key until its acknowledgement reaches the sink; different keys are
// published concurrently. Released, the rest follow in order. Counted
// server-side, in the stream, on both servers.
func TestKeysNextEntryWaitsForTheAck(t *testing.T) {
	t.Parallel()
	for _, tg := range targets {
		t.Run(tg.name, func(t *testing.T) {
			t.Parallel()
			p := newProxied(t, tg.url(t), "GATE", natssink.Options{PublishTimeout: time.Minute})
			e := p.entry
			msgs := []outbox.Entry{e("a1", "a"), e("a2", "a"), e("b1", "b"), e("a3", "a"), e("b2", "b"), e("c1", "c"), e("n1", ""), e("n2", "")}
			p.proxy.HoldReplies()
			done := make(chan []error, 1)
			go func() { done <- p.sink.Publish(context.Background(), msgs) }()

			// The first of each key and the unkeyed ones arrive, and
			// nothing else while the acknowledgements are held (a
			// wrongly sent message gets a second to land).
			p.waitStored(t, 5)
			time.Sleep(time.Second)
			got := ids(readAll(t, p.st))
			require.ElementsMatch(t, []string{"a1", "b1", "c1", "n1", "n2"}, got, "stored while the acknowledgements were held")
			select {
			case errs := <-done:
				t.Fatalf("Publish returned before any acknowledgement: %v", errs)
			default:
			}

			p.proxy.Heal()
			var errs []error
			select {
			case errs = <-done:
			case <-time.After(30 * time.Second):
				t.Fatal("Publish did not return after the acknowledgements were let through")
			}
			for i, err := range errs {
				require.NoError(t, err, msgs[i].ID)
			}
			got = ids(readAll(t, p.st))
			require.Len(t, got, len(msgs))
			require.Equal(t, []string{"a1", "a2", "a3"}, only(got, "a1", "a2", "a3"))
			require.Equal(t, []string{"b1", "b2"}, only(got, "b1", "b2"))
		})
	}
}

// TestRetryableFailureFailsTheKeysLaterEntries: when an entry fails with a
// retryable error, the later entries of its key fail too and are never
// sent, whether it failed by the call's end (its acknowledgement held past
// PublishTimeout) or before (the server unreachable); an entry after a
// permanent failure of its key is published.
func TestRetryableFailureFailsTheKeysLaterEntries(t *testing.T) {
	t.Parallel()
	for _, tg := range targets {
		t.Run(tg.name, func(t *testing.T) {
			t.Parallel()
			p := newProxied(t, tg.url(t), "FAIL", natssink.Options{PublishTimeout: 500 * time.Millisecond})
			e := p.entry
			p.proxy.HoldReplies()
			errs := p.sink.Publish(context.Background(), []outbox.Entry{e("a1", "a"), e("a2", "a"), e("a3", "a")})
			p.proxy.Heal()
			// a1's acknowledgement did not come within PublishTimeout
			// (the sink's timer or the JetStream context's, whichever
			// fired first).
			require.Equal(t, backoff.ClassSemiTransient, backoff.ClassOf(errs[0]), "%v", errs[0])
			require.ErrorContains(t, errs[0], "not acknowledged within Options.PublishTimeout")
			for _, err := range errs[1:] {
				require.Error(t, err)
				require.NotEqual(t, backoff.ClassPermanent, backoff.ClassOf(err), "%v", err)
			}
			// a2 and a3 were not sent: a marker sent after them on the
			// same connection is stored right after a1.
			require.NoError(t, publishOne(t, p.sink, e("m1", "")))
			require.Equal(t, []string{"a1", "m1"}, ids(readAll(t, p.st)))
			// The server stored a1 (only its acknowledgement was held):
			// publishing the key again drops a1 as a duplicate.
			errs = p.sink.Publish(context.Background(), []outbox.Entry{e("a1", "a"), e("a2", "a")})
			require.NoError(t, errs[0])
			require.NoError(t, errs[1])
			require.Equal(t, []string{"a1", "m1", "a2"}, ids(readAll(t, p.st)))

			// A permanent failure (an invalid header) lets the key go on.
			bad := e("b1", "b")
			bad.Headers = map[string]string{"bad header": "x"}
			errs = p.sink.Publish(context.Background(), []outbox.Entry{bad, e("b2", "b")})
			require.Equal(t, backoff.ClassPermanent, backoff.ClassOf(errs[0]), "%v", errs[0])
			require.NoError(t, errs[1])

			// A retryable failure before the call's end (the server
			// unreachable: publishing fails at once) fails the key's
			// later entries without sending them.
			p.down(t)
			errs = p.sink.Publish(context.Background(), []outbox.Entry{e("c1", "c"), e("c2", "c")})
			p.heal(t)
			require.Equal(t, backoff.ClassTransient, backoff.ClassOf(errs[0]), "%v", errs[0])
			require.ErrorContains(t, errs[0], "connection to the server was lost")
			require.Equal(t, backoff.ClassTransient, backoff.ClassOf(errs[1]), "%v", errs[1])
			require.ErrorContains(t, errs[1], "not published: entry c1 of its key failed first")
			require.NoError(t, publishOne(t, p.sink, e("marker", "")))
			require.Equal(t, []string{"a1", "m1", "a2", "b2", "marker"}, ids(readAll(t, p.st)), "nothing of key c was stored")
		})
	}
}

// TestCancelledContextPublishesNothing: Publish with a context already
// cancelled publishes nothing and fails every entry with the context's
// error, as it is (the relay stopping is not a failure of the entries).
func TestCancelledContextPublishesNothing(t *testing.T) {
	t.Parallel()
	p := newProxied(t, embeddedURL(t), "CANCEL", natssink.Options{})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	errs := p.sink.Publish(ctx, []outbox.Entry{p.entry("c1", "a"), p.entry("c2", "b"), p.entry("c3", "")})
	for _, err := range errs {
		require.Equal(t, context.Canceled, err)
	}
	require.NoError(t, publishOne(t, p.sink, p.entry("marker", "")))
	require.Equal(t, []string{"marker"}, ids(readAll(t, p.st)))
}
