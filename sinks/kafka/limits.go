package kafkasink

import (
	"errors"
	"fmt"

	"github.com/outboxrelay/outbox"
)

// MaxTopicLen is the longest topic name Kafka accepts, in bytes.
const MaxTopicLen = 249

// TopicRule checks that topic is a legal Kafka topic name: 1 to 249
// characters from [a-zA-Z0-9._-], and not "." or "..". It returns nil for
// a legal name and otherwise an error that names the problem and the fix.
// Use it as [outbox.Limits].Topic (or through [Limits]) so an illegal topic
// is rejected at append instead of being parked at publish.
func TopicRule(topic string) error {
	switch {
	case topic == "":
		return errors.New("kafkasink: a Kafka topic name cannot be empty")
	case topic == "." || topic == "..":
		return fmt.Errorf("kafkasink: %q is not a legal Kafka topic name; use letters, digits, '.', '_' or '-' and not only dots", topic)
	case len(topic) > MaxTopicLen:
		return fmt.Errorf("kafkasink: a Kafka topic name is at most %d characters, this one has %d; shorten it", MaxTopicLen, len(topic))
	}
	for i := 0; i < len(topic); i++ {
		c := topic[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-' {
			continue
		}
		return fmt.Errorf("kafkasink: Kafka topic names may only hold [a-zA-Z0-9._-]; byte %d is %q; replace it (for example with '_' or '-')", i, c)
	}
	return nil
}

// Limits returns the append-time limits of a Kafka sink: [TopicRule] and a
// payload limit of maxMessageBytes, the broker's message.max.bytes (or
// the topic's max.message.bytes; the producer's own limit if lower). Pass
// it as the Limits option of a backend. maxMessageBytes 0 checks topics
// only.
//
// The check covers the payload alone: the record also carries the key,
// headers and batch overhead, so a payload just under the limit can still
// be refused at publish (and parked with MESSAGE_TOO_LARGE); leave room
// for them in maxMessageBytes if that matters.
func Limits(maxMessageBytes int) outbox.Limits {
	return outbox.Limits{MaxPayload: maxMessageBytes, Topic: TopicRule}
}
