package amqpinbox

import (
	"fmt"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/outboxrelay/outbox"
	"github.com/outboxrelay/outbox/inbox"
)

// DefaultIDHeader is the header read for the outbox entry's ID when a
// delivery has no message_id (amqpsink sets both).
const DefaultIDHeader = "outbox-id"

// Message is the inbox's view of d, with the defaults: ID from message_id
// (or, when that is empty, the header "outbox-id"), Key from the routing
// key (amqpsink's default routing key is the entry's Key), Seq from the
// header outbox.HeaderKeySeq ("outbox-key-seq", 0 when absent) and Data =
// d, which the handler gets back as m.Data.(amqp.Delivery). A delivery
// without an ID, or whose sequence header is not a sequence number, gives
// an error wrapping inbox.ErrInvalidMessage. Message does not acknowledge
// d.
func Message(d amqp.Delivery) (inbox.Message, error) {
	return message(d, DefaultIDHeader, routingKey)
}

func routingKey(d amqp.Delivery) string { return d.RoutingKey }

func message(d amqp.Delivery, idHeader string, key func(amqp.Delivery) string) (inbox.Message, error) {
	id := d.MessageId
	if id == "" {
		id, _ = d.Headers[idHeader].(string)
	}
	if id == "" {
		return inbox.Message{}, fmt.Errorf("amqpinbox: delivery from exchange %q with routing key %q has neither a message_id nor a %s header, so the inbox cannot deduplicate it; publish it through amqpsink (or set message_id to the outbox entry's ID): %w",
			d.Exchange, d.RoutingKey, idHeader, inbox.ErrInvalidMessage)
	}
	m := inbox.Message{ID: id, Key: key(d), Data: d}
	if v, ok := d.Headers[outbox.HeaderKeySeq]; ok {
		seq, err := keySeq(v)
		if err != nil {
			return inbox.Message{}, fmt.Errorf("amqpinbox: message %q: %w: %w", id, err, inbox.ErrInvalidMessage)
		}
		m.Seq = seq
	}
	return m, nil
}

// keySeq reads a sequence header: text, as amqpsink writes it, or an
// integer another publisher may have used.
func keySeq(v any) (int64, error) {
	var s string
	switch v := v.(type) {
	case string:
		s = v
	case []byte:
		s = string(v)
	case int8, int16, int32, int64, int, uint8, uint16, uint32, uint64:
		s = fmt.Sprint(v)
	default:
		return 0, fmt.Errorf("header %s is a %T, want text", outbox.HeaderKeySeq, v)
	}
	return outbox.ParseKeySeq(s)
}
