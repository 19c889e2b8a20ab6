package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/outboxrelay/outbox"
	natssink "github.com/outboxrelay/outbox/sinks/nats"
)

// NATS JetStream as a destination of the broker workloads: each run
// publishes into a stream of its own ("OBENCH_<tag>", file storage, one
// subject "obench.<tag>", the default 2-minute duplicate window), deleted
// afterwards.

// natsStallWait bounds how long the raw client's PublishMsgAsync waits
// for room among its pending acknowledgements before it gives up
// (jetstream.WithStallWait; its default, 200 ms, is shorter than a stall
// of this shared machine).
const natsStallWait = 30 * time.Second

type natsTarget struct {
	url string
	nc  *nats.Conn // administration and the consumers
	js  jetstream.JetStream
}

func dialNATSTarget(ctx context.Context, u string) (brokerTarget, error) {
	nc, err := nats.Connect(u, nats.Name("outbox-bench"))
	if err != nil {
		return brokerTarget{}, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return brokerTarget{}, err
	}
	if _, err := js.AccountInfo(ctx); err != nil {
		nc.Close()
		return brokerTarget{}, fmt.Errorf("JetStream: %w (is the server started with -js?)", err)
	}
	t := &natsTarget{url: u, nc: nc, js: js}
	return brokerTarget{
		name: "nats", key: "nats", title: "NATS JetStream", server: "nats-server",
		raw:   "raw nats.go PublishMsgAsync + WithMsgID, every ack awaited",
		sink:  "natssink",
		open:  t.open,
		close: nc.Close,
	}, nil
}

type natsDest struct {
	t       *natsTarget
	stream  string
	subject string
}

func (t *natsTarget) open(ctx context.Context) (destination, error) {
	tag := newDestTag()
	d := &natsDest{t: t, stream: "OBENCH_" + tag, subject: "obench." + tag}
	_, err := t.js.CreateStream(ctx, jetstream.StreamConfig{
		Name:     d.stream,
		Subjects: []string{d.subject},
		Storage:  jetstream.FileStorage,
	})
	if err != nil {
		return nil, fmt.Errorf("creating stream %s: %w", d.stream, err)
	}
	return d, nil
}

func (d *natsDest) topic() string { return d.subject }

func (d *natsDest) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := d.t.js.DeleteStream(ctx, d.stream); err != nil {
		fmt.Fprintf(os.Stderr, "cleanup: deleting stream %s: %v\n", d.stream, err)
	}
}

// rawPublish publishes every message asynchronously from one goroutine
// (so each key's messages go out in order on one connection) with the
// client's default bound of pending acknowledgements (4,000), then waits
// for every acknowledgement.
func (d *natsDest) rawPublish(ctx context.Context, m *messages, ids []string, tr *tracker) error {
	nc, err := nats.Connect(d.t.url, nats.Name("outbox-bench-raw"))
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	futs := make([]jetstream.PubAckFuture, len(ids))
	for i := range ids {
		msg := nats.NewMsg(d.subject)
		msg.Data = m.payload[i]
		natsHeaders(msg, ids[i], m.keys[i])
		if futs[i], err = js.PublishMsgAsync(msg, jetstream.WithMsgID(ids[i]), jetstream.WithStallWait(natsStallWait)); err != nil {
			return fmt.Errorf("publish %d: %w", i, err)
		}
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(drainTimeout(len(ids))):
		return fmt.Errorf("timed out with %d acknowledgements pending", js.PublishAsyncPending())
	}
	for i, f := range futs {
		select {
		case ack := <-f.Ok():
			if ack.Duplicate {
				return fmt.Errorf("message %d: the stream took it for a duplicate", i)
			}
			tr.markOrdered(m.keys[i], m.payload[i])
		case err := <-f.Err():
			return fmt.Errorf("message %d: %w", i, err)
		}
	}
	return nil
}

// natsHeaders sets what the raw client sends besides Nats-Msg-Id: the
// headers our sink sends for an entry without headers of its own.
func natsHeaders(msg *nats.Msg, id, key string) {
	msg.Header[natssink.DefaultIDHeader] = []string{id}
	msg.Header[natssink.DefaultKeyHeader] = []string{key}
}

// held is the stream's message count.
func (d *natsDest) held(ctx context.Context) (int, error) {
	st, err := d.t.js.Stream(ctx, d.stream)
	if err != nil {
		return 0, err
	}
	info, err := st.Info(ctx)
	if err != nil {
		return 0, err
	}
	return int(info.State.Msgs), nil
}

// consume marks every message of the stream, from its first, in tr.
func (d *natsDest) consume(ctx context.Context, m *messages, tr *tracker) (func(), error) {
	cons, err := d.t.js.OrderedConsumer(ctx, d.stream, jetstream.OrderedConsumerConfig{})
	if err != nil {
		return nil, err
	}
	cc, err := cons.Consume(func(msg jetstream.Msg) {
		tr.markOrdered(keyFrom(m, msg.Data()), msg.Data())
	}, jetstream.ConsumeErrHandler(func(_ jetstream.ConsumeContext, err error) {
		if !errors.Is(err, jetstream.ErrNoHeartbeat) {
			fmt.Fprintf(os.Stderr, "nats consumer: %v\n", err)
		}
	}))
	if err != nil {
		return nil, err
	}
	return cc.Stop, nil
}

// sink is our sink into the stream's subject, as natssink.Dial builds it
// (its default subject mapping is the entry's topic).
func (d *natsDest) sink(context.Context) (outbox.Sink, func(), error) {
	s, err := natssink.Dial(d.t.url, natssink.Options{})
	if err != nil {
		return nil, nil, err
	}
	return s, func() { s.Close() }, nil
}
