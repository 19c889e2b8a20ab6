package kafkasink_test

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/twmb/franz-go/pkg/kgo"

	kafkasink "github.com/outboxrelay/outbox/sinks/kafka"
)

func TestEntryIDAndHeader(t *testing.T) {
	t.Parallel()
	rec := &kgo.Record{Headers: []kgo.RecordHeader{{Key: "outbox-id", Value: []byte("e1")}, {Key: "x", Value: []byte("1")}, {Key: "x", Value: []byte("2")}}}
	assert.Equal(t, "e1", kafkasink.EntryID(rec))
	v, ok := kafkasink.Header(rec, "x")
	assert.True(t, ok)
	assert.Equal(t, "1", v, "the first header of a name wins")
	_, ok = kafkasink.Header(rec, "missing")
	assert.False(t, ok)
	assert.Empty(t, kafkasink.EntryID(&kgo.Record{}))
	assert.Empty(t, kafkasink.EntryID(nil))
}

func TestDeduperRemembersAWindow(t *testing.T) {
	t.Parallel()
	d := kafkasink.NewDeduper(3)
	for i := range 3 {
		assert.False(t, d.Seen(fmt.Sprint(i)))
	}
	assert.True(t, d.Seen("0"), "a duplicate inside the window")
	assert.False(t, d.Seen("3"), "evicts the least recently seen: 1")
	assert.False(t, d.Seen("1"), "1 was evicted, so it counts as new")
	assert.True(t, d.Seen("0"))
	assert.False(t, d.Seen(""), "records without an ID are never duplicates")
	assert.False(t, d.Seen(""))
	rec := &kgo.Record{Headers: []kgo.RecordHeader{{Key: kafkasink.DefaultIDHeader, Value: []byte("r")}}}
	assert.False(t, d.SeenRecord(rec))
	assert.True(t, d.SeenRecord(rec))
	assert.False(t, kafkasink.NewDeduper(0).Seen("a"), "window below 1 counts as 1")
}
