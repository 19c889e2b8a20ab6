package kafkainbox

import (
	"fmt"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outboxrelay/outbox"
	"github.com/outboxrelay/outbox/inbox"
	kafkasink "github.com/outboxrelay/outbox/sinks/kafka"
)

// Message maps a record published by the outbox's Kafka sink to what the
// inbox needs: ID is the entry ID of header "outbox-id"
// ([kafkasink.EntryID]), Key the record key, Seq the per-key sequence
// number of header "outbox-key-seq" ([outbox.HeaderKeySeq], 0 when the
// record has none), Data the record itself (a handler reads it back with
// m.Data.(*kgo.Record)). Offset is left nil: the [Consumer] sets it.
//
// A record without an ID, or whose sequence header does not parse, gives
// an error wrapping [inbox.ErrInvalidMessage] that names its topic,
// partition and offset: such a record cannot be deduplicated or ordered,
// and is not to be skipped silently. Message does not keep rec beyond
// putting it into Data.
func Message(rec *kgo.Record) (inbox.Message, error) {
	if rec == nil {
		return inbox.Message{}, fmt.Errorf("kafkainbox: Message got a nil record: %w", inbox.ErrInvalidMessage)
	}
	id := kafkasink.EntryID(rec)
	if id == "" {
		return inbox.Message{}, fmt.Errorf("kafkainbox: record %s[%d] at offset %d has no %s header, so the inbox cannot deduplicate it; publish it through the outbox's Kafka sink, or set the header to a unique ID: %w",
			rec.Topic, rec.Partition, rec.Offset, kafkasink.DefaultIDHeader, inbox.ErrInvalidMessage)
	}
	m := inbox.Message{ID: id, Key: string(rec.Key), Data: rec}
	if v, ok := kafkasink.Header(rec, outbox.HeaderKeySeq); ok {
		n, err := outbox.ParseKeySeq(v)
		if err != nil {
			return inbox.Message{}, fmt.Errorf("kafkainbox: record %s[%d] at offset %d (entry %q): %v: %w",
				rec.Topic, rec.Partition, rec.Offset, id, err, inbox.ErrInvalidMessage)
		}
		m.Seq = n
	}
	return m, nil
}
