package relaycmd

import (
	"strings"
	"testing"
	"time"
)

// TestForeignSinkFlags: setFlags reports the flags whose values differ
// from their defaults, embedded structs included, and only those: a
// duration or count at its default, an empty map and a false bool are not
// set.
func TestForeignSinkFlags(t *testing.T) {
	c := RelayCmd{KafkaClientID: "outbox-relay", KafkaPublishTimeout: 5 * time.Second, KafkaUnknownTopic: time.Minute,
		KafkaTopicMap: map[string]string{}, NATSFlags: NATSFlags{NATSPublishTimeout: 5 * time.Second}, AMQPFlags: AMQPFlags{AMQPPublishTimeout: 5 * time.Second}}
	if got := c.foreignSinkFlags(sinkNATS); len(got) != 0 {
		t.Errorf("defaults reported as set: %q", got)
	}
	c.KafkaPublishTimeout, c.AMQPChannels, c.NATSSubjectPrefix = 6*time.Second, 2, "p."
	c.SinkURL = "nats://n:4222"
	got := strings.Join(c.foreignSinkFlags(sinkNATS), "\n")
	for _, want := range []string{"--kafka-publish-timeout is a Kafka flag, but --sink-url nats:// selects NATS", "--amqp-channels is a RabbitMQ flag"} {
		if !strings.Contains(got, want) {
			t.Errorf("foreignSinkFlags lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "--nats-subject-prefix") {
		t.Errorf("a flag of the selected sink is reported:\n%s", got)
	}
}
