package natssink_test

import (
	"context"
	"net/url"
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
			server := tg.url(t)
			sfx := suffix()
			subj := "gate." + sfx
			st := newStream(t, connect(t, server), "GATE_"+sfx, []string{subj})
			u, err := url.Parse(server)
			require.NoError(t, err)
			proxy := newFaultProxy(t, u.Host)
			sink, err := natssink.Dial(proxy.URL(), natssink.Options{PublishTimeout: time.Minute})
			require.NoError(t, err)
			defer sink.Close()

			e := func(id, key string) outbox.Entry {
				return outbox.Entry{ID: id, Topic: subj, Key: key, Payload: []byte(id)}
			}
			msgs := []outbox.Entry{e("a1", "a"), e("a2", "a"), e("b1", "b"), e("a3", "a"), e("b2", "b"), e("c1", "c"), e("n1", ""), e("n2", "")}
			proxy.HoldReplies()
			done := make(chan []error, 1)
			go func() { done <- sink.Publish(context.Background(), msgs) }()

			// The first of each key and the unkeyed ones arrive...
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			for {
				info, err := st.Info(ctx)
				require.NoError(t, err)
				if info.State.Msgs >= 5 {
					break
				}
				time.Sleep(10 * time.Millisecond)
			}
			// ...and nothing else while the acknowledgements are held
			// (give a wrongly sent message a second to land).
			time.Sleep(time.Second)
			got := ids(readAll(t, st))
			require.ElementsMatch(t, []string{"a1", "b1", "c1", "n1", "n2"}, got, "stored while the acknowledgements were held")
			select {
			case errs := <-done:
				t.Fatalf("Publish returned before any acknowledgement: %v", errs)
			default:
			}

			proxy.Heal()
			var errs []error
			select {
			case errs = <-done:
			case <-ctx.Done():
				t.Fatal("Publish did not return after the acknowledgements were let through")
			}
			for i, err := range errs {
				require.NoError(t, err, msgs[i].ID)
			}
			got = ids(readAll(t, st))
			require.Len(t, got, len(msgs))
			require.Equal(t, []string{"a1", "a2", "a3"}, only(got, "a1", "a2", "a3"))
			require.Equal(t, []string{"b1", "b2"}, only(got, "b1", "b2"))
		})
	}
}

// TestRetryableFailureFailsTheKeysLaterEntries: when an entry fails with a
// retryable error (its acknowledgement does not come within
// PublishTimeout: the server's replies are held), the later entries of its
// key fail too, transient, and are never sent; an entry after a permanent
// failure of its key is published.
func TestRetryableFailureFailsTheKeysLaterEntries(t *testing.T) {
	t.Parallel()
	for _, tg := range targets {
		t.Run(tg.name, func(t *testing.T) {
			t.Parallel()
			server := tg.url(t)
			sfx := suffix()
			subj := "fail." + sfx
			st := newStream(t, connect(t, server), "FAIL_"+sfx, []string{subj})
			u, err := url.Parse(server)
			require.NoError(t, err)
			proxy := newFaultProxy(t, u.Host)
			sink, err := natssink.Dial(proxy.URL(), natssink.Options{PublishTimeout: 500 * time.Millisecond})
			require.NoError(t, err)
			defer sink.Close()

			e := func(id, key string) outbox.Entry {
				return outbox.Entry{ID: id, Topic: subj, Key: key, Payload: []byte(id)}
			}
			proxy.HoldReplies()
			errs := sink.Publish(context.Background(), []outbox.Entry{e("a1", "a"), e("a2", "a"), e("a3", "a")})
			proxy.Heal()
			require.Equal(t, backoff.ClassSemiTransient, backoff.ClassOf(errs[0]), "%v", errs[0])
			require.ErrorContains(t, errs[0], "not acknowledged within Options.PublishTimeout")
			for _, err := range errs[1:] {
				require.Equal(t, backoff.ClassSemiTransient, backoff.ClassOf(err), "%v", err)
				require.ErrorContains(t, err, "waited for an earlier entry of its key")
			}
			// The server stored a1 (only its acknowledgement was held):
			// publishing the key again drops a1 as a duplicate.
			errs = sink.Publish(context.Background(), []outbox.Entry{e("a1", "a"), e("a2", "a")})
			require.NoError(t, errs[0])
			require.NoError(t, errs[1])
			require.Equal(t, []string{"a1", "a2"}, ids(readAll(t, st)))

			// A permanent failure (an invalid header) lets the key go on.
			bad := e("b1", "b")
			bad.Headers = map[string]string{"bad header": "x"}
			errs = sink.Publish(context.Background(), []outbox.Entry{bad, e("b2", "b")})
			require.Equal(t, backoff.ClassPermanent, backoff.ClassOf(errs[0]), "%v", errs[0])
			require.NoError(t, errs[1])

			// A retryable failure before the call's end (the server
			// unreachable: publishing fails at once) fails the key's
			// later entries without sending them.
			proxy.Down()
			for sink.Conn().IsConnected() {
				time.Sleep(5 * time.Millisecond)
			}
			errs = sink.Publish(context.Background(), []outbox.Entry{e("c1", "c"), e("c2", "c")})
			proxy.Heal()
			require.Equal(t, backoff.ClassTransient, backoff.ClassOf(errs[0]), "%v", errs[0])
			require.ErrorContains(t, errs[0], "connection to the server was lost")
			require.Equal(t, backoff.ClassTransient, backoff.ClassOf(errs[1]), "%v", errs[1])
			require.ErrorContains(t, errs[1], "not published: entry c1 of its key failed first")
			require.Equal(t, []string{"a1", "a2", "b2"}, ids(readAll(t, st)), "nothing of key c was stored")
		})
	}
}
