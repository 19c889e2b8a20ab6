package relaycmd

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/outboxrelay/outbox"
	kafkasink "github.com/outboxrelay/outbox/sinks/kafka"
)

// kafkaSink builds the Kafka sink from the --kafka-* flags (or the
// brokers of a kafka:// --sink-url). It makes no connection yet.
func (c *RelayCmd) kafkaSink() (*relaySink, error) {
	kopts, err := c.kafkaOptions()
	if err != nil {
		return nil, err
	}
	sink, err := kafkasink.Dial(c.KafkaBrokers, c.SinkOptions(), kopts...)
	if err != nil {
		return nil, fmt.Errorf("relay: %w", err)
	}
	closers := []func(){func() { _ = sink.Close() }}
	probe := sink.Client()
	if probe == nil { // transactional: one client per partition, built on use
		if probe, err = kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(c.KafkaBrokers...)}, kopts...)...); err != nil {
			_ = sink.Close()
			return nil, fmt.Errorf("relay: Kafka client options: %w", err)
		}
		closers = append(closers, probe.Close)
	}
	return &relaySink{
		Sink: sink, name: "Kafka", timeoutFlag: "--kafka-publish-timeout", timeout: c.KafkaPublishTimeout,
		failing: sink.Failing, probe: relayKafkaProbe(probe, c.KafkaBrokers),
		close: func() error {
			for _, f := range closers {
				f()
			}
			return nil
		},
		attrs: []any{"kafka_brokers", strings.Join(c.KafkaBrokers, ","), "kafka_tls", c.tlsOn(),
			"kafka_sasl", c.KafkaSASLMechanism, "kafka_transactional", c.KafkaTransactionalID != ""},
	}, nil
}

// relayKafkaProbe returns a reachability check of the brokers through
// client (kgo's Ping: a metadata request to any broker), whose errors name
// the brokers and, for a connection the broker closed, the usual causes.
func relayKafkaProbe(client *kgo.Client, brokers []string) func(context.Context) error {
	return func(ctx context.Context) error {
		err := client.Ping(ctx)
		if err == nil || ctx.Err() != nil {
			return err
		}
		var firstEOF *kgo.ErrFirstReadEOF
		hint := ""
		if errors.Is(err, io.EOF) || errors.As(err, &firstEOF) {
			hint = " (the broker closed the connection: a wrong SASL mechanism, user or password, TLS on one side only, or the broker is going away)"
		}
		return fmt.Errorf("Kafka at %s: %w%s", strings.Join(brokers, ","), err, hint)
	}
}

// kafkaOptions are the kgo options of the relay's Kafka clients, on top of
// kafkasink.Dial's defaults: client ID, topic auto-creation, TLS and SASL.
func (c *RelayCmd) kafkaOptions() ([]kgo.Opt, error) {
	opts := []kgo.Opt{kgo.ClientID(c.KafkaClientID)}
	if c.KafkaAutoCreate {
		opts = append(opts, kgo.AllowAutoTopicCreation())
	}
	if c.tlsOn() {
		cfg, err := c.tlsConfig()
		if err != nil {
			return nil, err
		}
		opts = append(opts, kgo.DialTLSConfig(cfg))
	}
	if m := c.saslMechanism(); m != nil {
		opts = append(opts, kgo.SASL(m))
	}
	return opts, nil
}

// tlsOn reports whether the relay talks TLS to the brokers.
func (c *RelayCmd) tlsOn() bool {
	return c.KafkaTLS || c.KafkaTLSCA != "" || c.KafkaTLSCert != "" || c.KafkaTLSServerName != ""
}

// tlsConfig builds the TLS configuration from the --kafka-tls-* flags
// (see tlsFromFiles).
func (c *RelayCmd) tlsConfig() (*tls.Config, error) {
	return tlsFromFiles("--kafka-tls", c.KafkaTLSCA, c.KafkaTLSCert, c.KafkaTLSKey, c.KafkaTLSServerName)
}

// saslMechanism is the SASL mechanism the flags ask for, or nil.
func (c *RelayCmd) saslMechanism() sasl.Mechanism {
	switch c.KafkaSASLMechanism {
	case "PLAIN":
		return plain.Auth{User: c.KafkaSASLUser, Pass: c.KafkaSASLPassword}.AsMechanism()
	case "SCRAM-SHA-256":
		return scram.Auth{User: c.KafkaSASLUser, Pass: c.KafkaSASLPassword}.AsSha256Mechanism()
	case "SCRAM-SHA-512":
		return scram.Auth{User: c.KafkaSASLUser, Pass: c.KafkaSASLPassword}.AsSha512Mechanism()
	}
	return nil
}

// sinkOptionFlags names the flags of the sink's options, for the sink's
// messages (the errors the relay logs and keeps as parked reasons); the
// options no flag sets keep their Go names.
var sinkOptionFlags = map[string]string{
	"UnknownTopicTimeout":             "--kafka-unknown-topic-timeout",
	"PublishTimeout":                  "--kafka-publish-timeout",
	"TransactionalIDPrefix":           "--kafka-transactional-id-prefix",
	"Topic":                           "--kafka-topic-prefix or --kafka-topic-map",
	kafkasink.OptionAutoTopicCreation: "--kafka-auto-create-topics",
}

// SinkOptions maps the topic and publishing flags onto the sink's options.
func (c *RelayCmd) SinkOptions() kafkasink.Options {
	o := kafkasink.Options{
		PublishTimeout:        c.KafkaPublishTimeout,
		TransactionalIDPrefix: c.KafkaTransactionalID,
		UnknownTopicTimeout:   c.KafkaUnknownTopic,
		OptionName:            func(o string) string { return sinkOptionFlags[o] },
	}
	if c.KafkaTopicPrefix != "" || len(c.KafkaTopicMap) > 0 {
		prefix, mapped := c.KafkaTopicPrefix, c.KafkaTopicMap
		o.Topic = func(e outbox.Entry) string {
			if t, ok := mapped[e.Topic]; ok {
				return t
			}
			return prefix + e.Topic
		}
	}
	return o
}
