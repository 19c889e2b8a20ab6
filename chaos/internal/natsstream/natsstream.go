// Package natsstream sets up the JetStream stream a chaos scenario's relays
// publish to, and reads it back as [history.Delivery] values.
//
// The stream is one ordered log: every delivery is on partition 0 of the
// stream's name, its offset the stream sequence, its time the time the
// server stored the message. A message's entry ID is its outbox-id header,
// else its Nats-Msg-Id (the NATS sink sets both); its key the outbox-key
// header.
package natsstream

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/outboxrelay/outbox/chaos/history"
)

// Headers the NATS sink sets by default.
const (
	IDHeader  = "outbox-id"
	KeyHeader = "outbox-key"
)

// Stream is the stream to create.
type Stream struct {
	// Name of the stream; Subjects it captures (default: Name).
	Name     string
	Subjects []string
	// Duplicates is the stream's duplicate window: a message whose
	// Nats-Msg-Id the stream stored less than this long ago is dropped.
	// Default 2 minutes (the server's).
	Duplicates time.Duration
}

// Setup creates the stream on the server at serverURL with file storage
// (or updates it to cfg). It retries until ctx ends, so that it can be
// called while a server is still starting.
func Setup(ctx context.Context, serverURL string, s Stream) error {
	if len(s.Subjects) == 0 {
		s.Subjects = []string{s.Name}
	}
	if s.Duplicates == 0 {
		s.Duplicates = 2 * time.Minute
	}
	cfg := jetstream.StreamConfig{
		Name:       s.Name,
		Subjects:   s.Subjects,
		Storage:    jetstream.FileStorage,
		Duplicates: s.Duplicates,
	}
	return retry(ctx, serverURL, "creating stream "+s.Name, func(ctx context.Context, js jetstream.JetStream) error {
		_, err := js.CreateOrUpdateStream(ctx, cfg)
		return err
	})
}

// Delete deletes the stream (a scenario's cleanup on a shared server).
func Delete(ctx context.Context, serverURL, name string) error {
	return withJS(ctx, serverURL, func(ctx context.Context, js jetstream.JetStream) error {
		err := js.DeleteStream(ctx, name)
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			return nil
		}
		return err
	})
}

// Consume reads the stream from its first message up to its last as of
// the call and returns one Delivery per message, in stream order. It
// retries (a server just restarted may not have recovered the stream yet)
// until ctx ends.
func Consume(ctx context.Context, serverURL, name string) ([]history.Delivery, error) {
	var out []history.Delivery
	err := retry(ctx, serverURL, "reading stream "+name, func(ctx context.Context, js jetstream.JetStream) error {
		var err error
		out, err = consume(ctx, js, name)
		return err
	})
	return out, err
}

func consume(ctx context.Context, js jetstream.JetStream, name string) ([]history.Delivery, error) {
	st, err := js.Stream(ctx, name)
	if err != nil {
		return nil, err
	}
	info, err := st.Info(ctx)
	if err != nil {
		return nil, err
	}
	last := info.State.LastSeq
	if info.State.Msgs == 0 {
		return nil, nil
	}
	cons, err := st.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{DeliverPolicy: jetstream.DeliverAllPolicy})
	if err != nil {
		return nil, err
	}
	out := make([]history.Delivery, 0, info.State.Msgs)
	var seen uint64
	for seen < last {
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("stream read to sequence %d of %d: %w", seen, last, err)
		}
		batch, err := cons.Fetch(1000, jetstream.FetchMaxWait(2*time.Second))
		if err != nil {
			return nil, err
		}
		for m := range batch.Messages() {
			md, err := m.Metadata()
			if err != nil {
				return nil, err
			}
			seq := md.Sequence.Stream
			if seq <= seen || seq > last {
				continue
			}
			seen = seq
			out = append(out, delivery(name, seq, md.Timestamp, m.Headers()))
		}
		if err := batch.Error(); err != nil && !errors.Is(err, nats.ErrTimeout) {
			return nil, err
		}
	}
	return out, nil
}

func delivery(stream string, seq uint64, at time.Time, h nats.Header) history.Delivery {
	id := h.Get(IDHeader)
	if id == "" {
		id = h.Get(nats.MsgIdHdr)
	}
	return history.Delivery{Topic: stream, Offset: int64(seq), ID: id, Key: h.Get(KeyHeader), At: at}
}

// retry runs f with a JetStream context on a fresh connection until it
// succeeds or ctx ends, a second apart.
func retry(ctx context.Context, serverURL, what string, f func(context.Context, jetstream.JetStream) error) error {
	var last error
	for {
		actx, cancel := context.WithTimeout(ctx, 10*time.Second)
		last = withJS(actx, serverURL, f)
		cancel()
		if last == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("natsstream: %s at %s: %w (last error: %v)", what, redacted(serverURL), ctx.Err(), last)
		case <-time.After(time.Second):
		}
	}
}

func withJS(ctx context.Context, serverURL string, f func(context.Context, jetstream.JetStream) error) error {
	nc, err := nats.Connect(serverURL, nats.Timeout(5*time.Second), nats.NoReconnect())
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	return f(ctx, js)
}

func redacted(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		return "(a URL that does not parse)"
	}
	return u.Redacted()
}
