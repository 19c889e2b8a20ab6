package natssink_test

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/outboxrelay/outbox"
	"github.com/outboxrelay/outbox/conformance/sinksuite"
	natssink "github.com/outboxrelay/outbox/sinks/nats"
)

// suiteMaxMsgSize is the MaxMsgSize of the suite's streams.
const suiteMaxMsgSize = 512 << 10

// TestSinkSuite runs the sink conformance suite on the embedded server and
// on the real one, the sink connected through a fault proxy (for the
// unreachable and stalled faults) and every stream and subject its own.
func TestSinkSuite(t *testing.T) {
	t.Parallel()
	for _, tg := range targets {
		t.Run(tg.name, func(t *testing.T) {
			t.Parallel()
			server := tg.url(t)
			sinksuite.Run(t, func(t *testing.T, cfg sinksuite.Config) sinksuite.Harness {
				return newSuiteHarness(t, server, cfg)
			})
		})
	}
}

// suiteHarness is one destination: a stream capturing one subject, to
// which the sink maps Config.Topic (Options.Subject).
type suiteHarness struct {
	sink    *natssink.Sink
	js      jetstream.JetStream // direct to the server, not through the proxy
	proxy   *faultProxy
	cfg     jetstream.StreamConfig
	subject string
}

func newSuiteHarness(t *testing.T, server string, cfg sinksuite.Config) *suiteHarness {
	t.Helper()
	sfx := suffix()
	h := &suiteHarness{subject: "suite." + sfx + ".msgs"}
	nc := connect(t, server)
	var err error
	h.js, err = jetstream.New(nc)
	require.NoError(t, err)
	h.cfg = jetstream.StreamConfig{
		Name: "SUITE_" + sfx, Subjects: []string{h.subject}, Storage: jetstream.FileStorage,
		Duplicates: 2 * time.Minute, MaxMsgSize: suiteMaxMsgSize,
	}
	newStream(t, nc, h.cfg.Name, h.cfg.Subjects, func(c *jetstream.StreamConfig) { *c = h.cfg })
	u, err := url.Parse(server)
	require.NoError(t, err)
	h.proxy = newFaultProxy(t, u.Host)
	h.sink, err = natssink.Dial(h.proxy.URL(), natssink.Options{
		Subject: func(e outbox.Entry) string {
			if e.Topic == cfg.Topic {
				return h.subject
			}
			return e.Topic
		},
		// The suite's stalls last 500ms; a short timeout keeps the
		// LandingBound case (which waits for the bound) short.
		PublishTimeout: 2 * time.Second,
	})
	require.NoError(t, err)
	t.Cleanup(func() { _ = h.sink.Close() })
	return h
}

func (h *suiteHarness) Sink() outbox.Sink { return h.sink }

// Read returns every message of the stream, once it holds n or ctx ends.
func (h *suiteHarness) Read(ctx context.Context, n int) ([]sinksuite.Message, error) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	st, err := h.js.Stream(rctx, h.cfg.Name)
	if err != nil {
		return nil, err
	}
	var info *jetstream.StreamInfo
	for {
		if info, err = st.Info(rctx); err != nil {
			return nil, err
		}
		if int(info.State.Msgs) >= n || ctx.Err() != nil {
			break
		}
		select {
		case <-ctx.Done():
		case <-time.After(20 * time.Millisecond):
		}
	}
	var out []sinksuite.Message
	for seq := info.State.FirstSeq; info.State.Msgs > 0 && seq <= info.State.LastSeq; seq++ {
		m, err := st.GetMsg(rctx, seq)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue
		}
		if err != nil {
			return nil, err
		}
		hs := map[string]string{}
		for k, v := range m.Header {
			hs[k] = strings.Join(v, ",")
		}
		out = append(out, sinksuite.Message{
			ID: m.Header.Get(natssink.DefaultIDHeader), Key: m.Header.Get(natssink.DefaultKeyHeader),
			Payload: m.Data, Headers: hs,
		})
	}
	return out, nil
}

func (h *suiteHarness) Faults() []sinksuite.Fault {
	noop := func(context.Context) error { return nil }
	return []sinksuite.Fault{
		{
			Name: "NoStreamForTheSubject", Permanent: true, Mentions: []string{h.subject, "stream"},
			Apply: func(ctx context.Context, _ *outbox.Entry) (func(context.Context) error, error) {
				if err := h.js.DeleteStream(ctx, h.cfg.Name); err != nil {
					return nil, err
				}
				return func(ctx context.Context) error {
					_, err := h.js.CreateOrUpdateStream(ctx, h.cfg)
					return err
				}, nil
			},
		},
		{
			Name: "OverTheStreamsMaxMsgSize", PerEntry: true, Permanent: true, Mentions: []string{"MaxMsgSize", h.cfg.Name},
			Apply: func(_ context.Context, e *outbox.Entry) (func(context.Context) error, error) {
				e.Payload = make([]byte, suiteMaxMsgSize+64<<10) // under the server's max_payload (1MB)
				return noop, nil
			},
		},
		{
			Name: "OverTheServersMaxPayload", PerEntry: true, Permanent: true, Mentions: []string{"max_payload"},
			Apply: func(_ context.Context, e *outbox.Entry) (func(context.Context) error, error) {
				e.Payload = make([]byte, 2<<20) // nats-server's default max_payload is 1MB
				return noop, nil
			},
		},
		{
			Name: "StreamFullWithDiscardNew", Permanent: true, Mentions: []string{"MaxBytes", h.cfg.Name},
			Apply: func(ctx context.Context, _ *outbox.Entry) (func(context.Context) error, error) {
				full := h.cfg
				full.MaxBytes, full.Discard, full.MaxMsgSize = 1, jetstream.DiscardNew, 0
				if _, err := h.js.UpdateStream(ctx, full); err != nil {
					return nil, err
				}
				return func(ctx context.Context) error {
					_, err := h.js.UpdateStream(ctx, h.cfg)
					return err
				}, nil
			},
		},
		{
			Name: "SubjectNotALiteral", PerEntry: true, Permanent: true, Mentions: []string{"Options.Subject", "wildcard"},
			Apply: func(_ context.Context, e *outbox.Entry) (func(context.Context) error, error) {
				e.Topic = "suite.*.wild"
				return noop, nil
			},
		},
		{
			Name: "HeaderNATSCannotCarry", PerEntry: true, Permanent: true, Mentions: []string{"bad header"},
			Apply: func(_ context.Context, e *outbox.Entry) (func(context.Context) error, error) {
				e.Headers = map[string]string{"bad header": "x"}
				return noop, nil
			},
		},
		{
			Name: "ServerUnreachable",
			Apply: func(ctx context.Context, _ *outbox.Entry) (func(context.Context) error, error) {
				h.proxy.Down()
				if err := h.waitConnected(ctx, false); err != nil {
					return nil, err
				}
				return func(ctx context.Context) error {
					h.proxy.Heal()
					return h.waitConnected(ctx, true)
				}, nil
			},
		},
		{
			Name: "NetworkStalled", Stalls: true,
			Apply: func(context.Context, *outbox.Entry) (func(context.Context) error, error) {
				h.proxy.Stall()
				return func(context.Context) error { h.proxy.Heal(); return nil }, nil
			},
		},
	}
}

// waitConnected waits until the sink's connection is connected (or not).
func (h *suiteHarness) waitConnected(ctx context.Context, want bool) error {
	for h.sink.Conn().IsConnected() != want {
		select {
		case <-ctx.Done():
			return fmt.Errorf("the sink's connection did not become connected=%v: %w (status %v)", want, ctx.Err(), h.sink.Conn().Status())
		case <-time.After(10 * time.Millisecond):
		}
	}
	return nil
}
