package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/outboxrelay/outbox/chaos/history"
	"github.com/outboxrelay/outbox/chaos/internal/broker"
	"github.com/outboxrelay/outbox/chaos/internal/natsstream"
	"github.com/outboxrelay/outbox/chaos/internal/rabbitqueue"
)

// brokerKind is the broker a scenario's relays publish to, through the
// sink of the same kind.
type brokerKind string

const (
	brokerKafka brokerKind = ""     // kfake, a process of its own (the default)
	brokerNATS  brokerKind = "nats" // a private nats-server -js, file storage
	brokerAMQP  brokerKind = "amqp" // a private RabbitMQ node, a durable queue
)

// describe is how the report names the broker.
func (k brokerKind) describe() string {
	switch k {
	case brokerNATS:
		return "a private nats-server -js (file storage; the NATS sink)"
	case brokerAMQP:
		return "a private RabbitMQ node (a durable queue; the RabbitMQ sink)"
	}
	return "kfake (the Kafka sink)"
}

// target is where a run's relays publish: the broker, how the relays
// reach it, and how the harness reads back what it holds.
type target interface {
	// relayArgs are the flags of `outbox relay` that select the sink and
	// its broker.
	relayArgs() []string
	// consume reads every message the broker holds for the scenario's
	// topic, in the broker's order for each key.
	consume(ctx context.Context) ([]history.Delivery, error)
	close()
}

// server is a private broker server a scenario kills and starts again.
type server interface {
	// Kill SIGKILLs the server and waits until it is reaped.
	Kill()
	// Restart starts it again on the same port and data directory and
	// returns once it serves.
	Restart(ctx context.Context) error
	// URL is the URL clients reach it at.
	URL() string
	Close()
}

// startTarget starts the run's broker (in dir) and sets up what the
// relays publish to before they start.
func (r *run) startTarget(ctx context.Context, dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	cfg := r.h.cfg
	switch r.sc.broker {
	case brokerKafka:
		b, err := broker.Start(ctx, r.h.kfake, dir, broker.Options{Partitions: cfg.partitions, Topics: []string{topic}})
		if err != nil {
			return fmt.Errorf("broker: %w", err)
		}
		r.broker, r.target = b, kafkaTarget{b, cfg.publish}
	case brokerNATS:
		srv, err := startNATSServer(ctx, dir)
		if err != nil {
			return notInstalled(err)
		}
		r.server = srv
		r.cleanup = append(r.cleanup, srv.Close)
		sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		if err := natsstream.Setup(sctx, srv.URL(), natsstream.Stream{Name: topic, Duplicates: natsDuplicates}); err != nil {
			return err
		}
		tap, err := natsstream.StartTap(srv.URL(), topic)
		if err != nil {
			return fmt.Errorf("nats-server: subscribing to %s: %w", topic, err)
		}
		r.target = natsTarget{r: r, srv: srv, tap: tap}
	case brokerAMQP:
		srv, err := startRabbitNode(ctx, dir)
		if err != nil {
			return notInstalled(err)
		}
		r.server = srv
		r.cleanup = append(r.cleanup, srv.Close)
		sctx, cancel := context.WithTimeout(ctx, 60*time.Second)
		defer cancel()
		if err := rabbitqueue.Setup(sctx, srv.URL(), topic, topic, tapQueue); err != nil {
			return err
		}
		// The scenario kills the node within seconds: the topology on disk
		// first (brokerproc.RabbitMQ.SyncMetadata).
		if err := srv.SyncMetadata(sctx); err != nil {
			return fmt.Errorf("RabbitMQ node: %w", err)
		}
		t := &amqpTarget{r: r, srv: srv, tap: rabbitqueue.StartTap(srv.URL(), tapQueue)}
		r.target = t
	default:
		return fmt.Errorf("unknown broker %q", r.sc.broker)
	}
	r.cleanup = append(r.cleanup, r.target.close)
	return nil
}

// natsDuplicates is the stream's duplicate window: longer than any
// scenario, so that every re-publish of an entry is dropped.
const natsDuplicates = 10 * time.Minute

// tapQueue is the queue bound beside the checked one (named after the
// topic) whose consumer notes arrival times.
const tapQueue = topic + "-tap"

type kafkaTarget struct {
	b       *broker.Broker
	publish time.Duration
}

func (k kafkaTarget) relayArgs() []string {
	return []string{"--kafka-brokers", k.b.Brokers(), "--kafka-publish-timeout", k.publish.String()}
}

func (k kafkaTarget) consume(ctx context.Context) ([]history.Delivery, error) {
	return k.b.Consume(ctx, topic)
}

func (k kafkaTarget) close() { _ = k.b.Close() }

type natsTarget struct {
	r   *run
	srv server
	tap *natsstream.Tap // counts publishes on the wire
}

func (n natsTarget) relayArgs() []string {
	return []string{"--sink-url", n.srv.URL(), "--nats-publish-timeout", n.r.h.cfg.publish.String()}
}

func (n natsTarget) consume(ctx context.Context) ([]history.Delivery, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	ds, err := natsstream.Consume(ctx, n.srv.URL(), topic)
	if err != nil {
		return nil, err
	}
	pubs, re := n.tap.Published()
	n.r.observe("On the wire (a core NATS subscriber, which misses what is published while it reconnects after a server kill): %d publishes, %d of them re-publishes of an entry already published; the stream holds %d messages.", pubs, re, len(ds))
	return ds, nil
}

func (n natsTarget) close() { n.tap.Close() }

type amqpTarget struct {
	r   *run
	srv server
	tap *rabbitqueue.Tap
}

func (a *amqpTarget) relayArgs() []string {
	return []string{"--sink-url", a.srv.URL(), "--amqp-publish-timeout", a.r.h.cfg.publish.String()}
}

func (a *amqpTarget) consume(ctx context.Context) ([]history.Delivery, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	ds, err := rabbitqueue.Consume(ctx, a.srv.URL(), topic)
	if err != nil {
		return nil, err
	}
	// Every message is in the tap's queue too: wait until the tap has
	// seen as many as the checked queue holds (or a while), so that they
	// get their own arrival times.
	deadline := time.Now().Add(10 * time.Second)
	guessed := a.tap.Stamp(ds)
	for guessed > 0 && time.Now().Before(deadline) {
		if err := sleep(ctx, 200*time.Millisecond); err != nil {
			return nil, err
		}
		guessed = a.tap.Stamp(ds)
	}
	a.r.observe("Arrival times: %d of the %d messages of queue %s were seen arriving by the harness's consumer of the second queue, %d timed from a neighbour; that consumer's connection failed %d times (each node kill, and every 200ms while the node was down).",
		len(ds)-guessed, len(ds), topic, guessed, a.tap.Reconnects())
	return ds, nil
}

func (a *amqpTarget) close() { a.tap.Close() }

// brokerDir is the directory of a run's broker files.
func (r *run) brokerDir() string { return filepath.Join(r.dir, "broker") }
