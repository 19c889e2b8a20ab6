package amqpsink

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/outboxrelay/outbox"
	"github.com/outboxrelay/outbox/backoff"
)

// TestParkOvertaken: a retryable failure of a key's entry followed by a
// confirmed later entry of the key (a nack, then an ack) turns permanent;
// failures not overtaken, of other keys or topics, of keyless entries,
// and permanent ones stay as they are.
func TestParkOvertaken(t *testing.T) {
	s := &Sink{}
	nack := backoff.Transient(ErrNacked)
	perm := backoff.Permanent(ErrUnroutable)
	es := []outbox.Entry{
		{ID: "a0", Topic: "t", Key: "a"}, // nacked, overtaken by a2
		{ID: "b0", Topic: "t", Key: "b"}, // nacked, not overtaken
		{ID: "a2", Topic: "t", Key: "a"}, // confirmed
		{ID: "c0", Topic: "u", Key: "a"}, // other topic, nacked, not overtaken
		{ID: "n0", Topic: "t"},           // keyless, nacked
		{ID: "n1", Topic: "t"},           // keyless, confirmed
		{ID: "d0", Topic: "t", Key: "d"}, // permanent
		{ID: "d1", Topic: "t", Key: "d"}, // confirmed
	}
	errs := []error{nack, nack, nil, nack, nack, nil, perm, nil}
	s.parkOvertaken(es, errs)
	assert.Equal(t, backoff.ClassPermanent, backoff.ClassOf(errs[0]))
	assert.Contains(t, errs[0].Error(), "a2")
	assert.True(t, errors.Is(errs[0], ErrNacked))
	for _, i := range []int{1, 3, 4} {
		assert.Same(t, nack, errs[i], "entry %s", es[i].ID)
	}
	assert.Same(t, perm, errs[6])
}
