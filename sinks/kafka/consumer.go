package kafkasink

import (
	"container/list"
	"sync"

	"github.com/twmb/franz-go/pkg/kgo"
)

// EntryID returns the outbox entry ID a record carries in the
// [DefaultIDHeader] header, or "" if it has none. Consumers deduplicate by
// it: the outbox delivers at least once, and every copy of an entry
// carries the same ID. For a sink configured with another
// [Options.IDHeader], use [Header].
func EntryID(rec *kgo.Record) string {
	v, _ := Header(rec, DefaultIDHeader)
	return v
}

// Header returns the value of the record's first header named name, and
// whether it has one.
func Header(rec *kgo.Record, name string) (string, bool) {
	if rec == nil {
		return "", false
	}
	for _, h := range rec.Headers {
		if h.Key == name {
			return string(h.Value), true
		}
	}
	return "", false
}

// Deduper remembers the most recent entry IDs a consumer processed, to
// drop the duplicates at-least-once delivery produces. Duplicates arrive
// close to the original (within about one relay batch per incident), so a
// window of a few times the relay's batch size per partition catches them
// with bounded memory. For exact, durable deduplication, store processed
// IDs with the consumer's own state, in the same transaction.
//
// The zero value is not usable; call [NewDeduper]. A Deduper is safe for
// concurrent use.
type Deduper struct {
	mu    sync.Mutex
	limit int
	order *list.List // of string, oldest first
	seen  map[string]*list.Element
}

// NewDeduper returns a Deduper that remembers the last window IDs
// (at least 1).
func NewDeduper(window int) *Deduper {
	return &Deduper{limit: max(window, 1), order: list.New(), seen: map[string]*list.Element{}}
}

// Seen records id and reports whether it was already among the remembered
// IDs: true means the record is a duplicate to skip. An empty id (a
// record not published by the outbox) is never a duplicate and is not
// remembered.
func (d *Deduper) Seen(id string) bool {
	if id == "" {
		return false
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if el, ok := d.seen[id]; ok {
		d.order.MoveToBack(el)
		return true
	}
	d.seen[id] = d.order.PushBack(id)
	if d.order.Len() > d.limit {
		oldest := d.order.Front()
		d.order.Remove(oldest)
		delete(d.seen, oldest.Value.(string))
	}
	return false
}

// SeenRecord is Seen(EntryID(rec)).
func (d *Deduper) SeenRecord(rec *kgo.Record) bool { return d.Seen(EntryID(rec)) }
