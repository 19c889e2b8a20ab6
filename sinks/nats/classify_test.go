package natssink_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/outboxrelay/outbox"
	"github.com/outboxrelay/outbox/backoff"
	natssink "github.com/outboxrelay/outbox/sinks/nats"
)

// TestClassify: the class of each error Classify knows, wrapped as the
// sink wraps them.
func TestClassify(t *testing.T) {
	t.Parallel()
	api := func(code jetstream.ErrorCode, desc string) error {
		return &jetstream.APIError{Code: 400, ErrorCode: code, Description: desc}
	}
	for _, c := range []struct {
		err  error
		want backoff.Class
	}{
		{natssink.ErrNoStream, backoff.ClassPermanent},
		{api(10054, "message size exceeds maximum allowed"), backoff.ClassPermanent},
		{api(10097, "header size exceeds maximum allowed of 64k"), backoff.ClassPermanent},
		{api(10077, "maximum messages exceeded"), backoff.ClassPermanent},
		{api(10077, "maximum bytes exceeded"), backoff.ClassPermanent},
		{api(10077, "maximum messages per subject exceeded"), backoff.ClassPermanent},
		{api(10077, "message too large"), backoff.ClassPermanent},
		{api(10077, "store is closed"), backoff.ClassTransient},
		{api(10008, "JetStream system temporarily unavailable"), backoff.ClassTransient},
		{nats.ErrMaxPayload, backoff.ClassPermanent},
		{nats.ErrBadSubject, backoff.ClassPermanent},
		{nats.ErrHeadersNotSupported, backoff.ClassPermanent},
		{jetstream.ErrNoStreamResponse, backoff.ClassTransient}, // unconfirmed: a leader election
		{nats.ErrNoResponders, backoff.ClassTransient},
		{nats.ErrDisconnected, backoff.ClassTransient},
		{nats.ErrReconnectBufExceeded, backoff.ClassTransient},
		{nats.ErrConnectionReconnecting, backoff.ClassTransient},
		{context.Canceled, backoff.ClassTransient},
		{context.DeadlineExceeded, backoff.ClassSemiTransient},
		{jetstream.ErrAsyncPublishTimeout, backoff.ClassSemiTransient},
		{jetstream.ErrTooManyStalledMsgs, backoff.ClassSemiTransient},
		{nats.ErrTimeout, backoff.ClassSemiTransient},
		{nats.ErrConnectionClosed, backoff.ClassSemiTransient},
		{nats.ErrNoServers, backoff.ClassSemiTransient},
		{io.EOF, backoff.ClassSemiTransient},
		{backoff.Permanent(errors.New("x")), backoff.ClassPermanent},
		{errors.New("something else"), backoff.ClassTransient},
	} {
		require.Equal(t, c.want, natssink.Classify(fmt.Errorf("wrapped: %w", c.err)), "%v", c.err)
	}
}

// publishOne publishes e through sink and returns its error.
func publishOne(t *testing.T, sink *natssink.Sink, e outbox.Entry) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return sink.Publish(ctx, []outbox.Entry{e})[0]
}

// TestNoStreamIsPermanentAndNamesTheFix: an entry whose subject no stream
// captures fails permanently with ErrNoStream, naming the subject, the
// topic and the mapping option (under the name OptionName gives it).
func TestNoStreamIsPermanentAndNamesTheFix(t *testing.T) {
	t.Parallel()
	for _, tg := range targets {
		t.Run(tg.name, func(t *testing.T) {
			t.Parallel()
			sink, err := natssink.Dial(tg.url(t), natssink.Options{
				OptionName: func(o string) string { return "--nats-" + o },
				Subject:    func(e outbox.Entry) string { return "nostream." + e.Topic },
			})
			require.NoError(t, err)
			defer sink.Close()
			topic := "t" + suffix()
			err = publishOne(t, sink, outbox.Entry{ID: "x1", Topic: topic, Payload: []byte("x")})
			require.Equal(t, backoff.ClassPermanent, backoff.ClassOf(err), "%v", err)
			require.ErrorIs(t, err, natssink.ErrNoStream)
			for _, want := range []string{"x1", `"nostream.` + topic + `"`, topic, "--nats-Subject", "create a stream"} {
				require.ErrorContains(t, err, want)
			}
		})
	}
}

// TestJetStreamUnavailableIsRetryable: with JetStream shut down on the
// server, publishing gets "no responders" and the stream cannot be looked
// up: that is a server restarting or a leader election, not a missing
// stream, so the entry fails retryable.
func TestJetStreamUnavailableIsRetryable(t *testing.T) {
	t.Parallel()
	srv := ownEmbedded(t)
	js, err := jetstream.New(connect(t, srv.ClientURL()))
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// The server is the test's own: the stream goes with it.
	_, err = js.CreateStream(ctx, jetstream.StreamConfig{Name: "JSDOWN", Subjects: []string{"jsdown"}})
	require.NoError(t, err)
	sink, err := natssink.Dial(srv.ClientURL(), natssink.Options{PublishTimeout: 2 * time.Second})
	require.NoError(t, err)
	defer sink.Close()
	require.NoError(t, publishOne(t, sink, outbox.Entry{ID: "before", Topic: "jsdown"}))
	require.NoError(t, srv.DisableJetStream())
	err = publishOne(t, sink, outbox.Entry{ID: "during", Topic: "jsdown"})
	require.Error(t, err)
	require.NotEqual(t, backoff.ClassPermanent, backoff.ClassOf(err), "%v", err)
	require.NotErrorIs(t, err, natssink.ErrNoStream)
	require.ErrorContains(t, err, "asking JetStream which stream captures the subject failed")
}

// TestStreamLimitsArePermanent: a stream full with DiscardNew (MaxMsgs,
// MaxMsgsPerSubject) refuses the message: permanent, naming the stream
// and the limit.
func TestStreamLimitsArePermanent(t *testing.T) {
	t.Parallel()
	for _, tg := range targets {
		for _, lim := range []struct {
			name string
			set  func(*jetstream.StreamConfig)
		}{
			{"MaxMsgs", func(c *jetstream.StreamConfig) { c.MaxMsgs, c.Discard = 1, jetstream.DiscardNew }},
			{"MaxMsgsPerSubject", func(c *jetstream.StreamConfig) {
				c.MaxMsgsPerSubject, c.Discard, c.DiscardNewPerSubject = 1, jetstream.DiscardNew, true
			}},
		} {
			t.Run(tg.name+"/"+lim.name, func(t *testing.T) {
				t.Parallel()
				url := tg.url(t)
				sfx := suffix()
				subj := "lim." + sfx
				newStream(t, connect(t, url), "LIM_"+sfx, []string{subj}, lim.set)
				sink, err := natssink.Dial(url, natssink.Options{})
				require.NoError(t, err)
				defer sink.Close()
				require.NoError(t, publishOne(t, sink, outbox.Entry{ID: "first", Topic: subj}))
				err = publishOne(t, sink, outbox.Entry{ID: "second", Topic: subj})
				require.Equal(t, backoff.ClassPermanent, backoff.ClassOf(err), "%v", err)
				require.ErrorContains(t, err, lim.name)
				require.ErrorContains(t, err, `"LIM_`+sfx+`"`)
			})
		}
	}
}
