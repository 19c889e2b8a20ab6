package natsinbox

import (
	"fmt"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/outboxrelay/outbox"
	"github.com/outboxrelay/outbox/inbox"
)

// Header names read unless [Options] name others: the ones natssink writes
// by default.
const (
	// DefaultIDHeader carries the outbox entry's ID; Nats-Msg-Id carries
	// it too and is read when this header is absent.
	DefaultIDHeader = "outbox-id"
	// DefaultKeyHeader carries the entry's Key.
	DefaultKeyHeader = "outbox-key"
)

// Message is the inbox's view of msg, with the default headers: ID from
// "outbox-id" (or, when that header is absent, Nats-Msg-Id), Key from
// "outbox-key", Seq from outbox.HeaderKeySeq ("outbox-key-seq", 0 when
// absent) and Data = msg, which the handler gets back as
// m.Data.(jetstream.Msg). A message without an ID, or whose sequence
// header is not a sequence number, gives an error wrapping
// inbox.ErrInvalidMessage. Message does not acknowledge msg.
func Message(msg jetstream.Msg) (inbox.Message, error) {
	return message(msg, DefaultIDHeader, DefaultKeyHeader)
}

func message(msg jetstream.Msg, idHeader, keyHeader string) (inbox.Message, error) {
	h := msg.Headers()
	id := h.Get(idHeader)
	if id == "" {
		id = h.Get(nats.MsgIdHdr)
	}
	if id == "" {
		return inbox.Message{}, fmt.Errorf("natsinbox: message on subject %q has neither a %s header nor %s, so the inbox cannot deduplicate it; publish it through natssink (or set one of the headers to the outbox entry's ID): %w",
			msg.Subject(), idHeader, nats.MsgIdHdr, inbox.ErrInvalidMessage)
	}
	m := inbox.Message{ID: id, Key: h.Get(keyHeader), Data: msg}
	if v := h.Get(outbox.HeaderKeySeq); v != "" {
		seq, err := outbox.ParseKeySeq(v)
		if err != nil {
			return inbox.Message{}, fmt.Errorf("natsinbox: message %q: %w: %w", id, err, inbox.ErrInvalidMessage)
		}
		m.Seq = seq
	}
	return m, nil
}
