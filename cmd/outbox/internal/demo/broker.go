package demo

import (
	"context"
	"fmt"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outboxrelay/outbox"
	kafkasink "github.com/outboxrelay/outbox/sinks/kafka"
)

// demoBroker is the broker the demo's relays publish to (--sink), with
// the sink in front of it and a consumer that reads the demo's topic back.
type demoBroker struct {
	// name describes the broker in the header ("in-process Kafka
	// (kfake)"); short names it in the summary ("Kafka").
	name, short string
	// sink publishes to the broker; the demo wraps it to inject faults.
	sink outbox.Sink
	// fault is the text of the transient failures the demo injects, as
	// the broker's client would say it.
	fault string
	// consume reads every message of the demo's topic from the start,
	// calling arrive with its entry ID and key in the order the broker
	// keeps, until ctx ends (then it returns nil) or it fails.
	consume func(ctx context.Context, arrive func(id, key string)) error
	// close stops the consumer's and the sink's clients and the broker;
	// it runs once, after the relays stopped.
	close func()
}

// startBroker starts (or, for amqp, connects to) the broker of --sink.
func startBroker(ctx context.Context, c *DemoCmd) (*demoBroker, error) {
	switch c.Sink {
	case "nats":
		return startNATS(ctx)
	case "amqp":
		return startAMQP(ctx, c)
	}
	return startKafka()
}

// startKafka starts an in-process Kafka speaking the real protocol
// (franz-go's kfake) with the demo's topic.
func startKafka() (*demoBroker, error) {
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(6, demoTopic))
	if err != nil {
		return nil, fmt.Errorf("demo: starting the in-process Kafka: %w", err)
	}
	sink, err := kafkasink.Dial(cluster.ListenAddrs(), kafkasink.Options{})
	if err != nil {
		cluster.Close()
		return nil, fmt.Errorf("demo: connecting to the in-process Kafka: %w", err)
	}
	consumer, err := kgo.NewClient(kgo.SeedBrokers(cluster.ListenAddrs()...), kgo.ConsumeTopics(demoTopic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		_ = sink.Close()
		cluster.Close()
		return nil, fmt.Errorf("demo: creating the consumer: %w", err)
	}
	return &demoBroker{
		name: "in-process Kafka (kfake)", short: "Kafka", sink: sink, fault: "NOT_LEADER_OR_FOLLOWER",
		consume: func(ctx context.Context, arrive func(id, key string)) error {
			for {
				fetches := consumer.PollFetches(ctx)
				if ctx.Err() != nil {
					return nil
				}
				fetches.EachRecord(func(rec *kgo.Record) { arrive(kafkasink.EntryID(rec), string(rec.Key)) })
			}
		},
		close: func() {
			consumer.Close()
			_ = sink.Close()
			cluster.Close()
		},
	}, nil
}
