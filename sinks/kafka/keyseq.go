package kafkasink

import (
	"container/list"
	"fmt"
	"sync"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outboxrelay/outbox"
)

// DefaultKeySeqMaxKeys is the number of keys a [KeySeqChecker] remembers
// when [KeySeqCheckerOptions].MaxKeys is 0.
const DefaultKeySeqMaxKeys = 100_000

// KeySeqStatus is what [KeySeqChecker.Check] found about one record.
type KeySeqStatus int

const (
	// KeySeqOK: the record carries the next number of its key (the last
	// one seen plus one), or 1 for a key not remembered.
	KeySeqOK KeySeqStatus = iota
	// KeySeqFirst: the key is not remembered (never seen, or forgotten to
	// stay within MaxKeys) and the number is above 1: there is nothing to
	// compare it with, so it is neither a gap nor a duplicate. A consumer
	// that reads a topic from its start and never forgets keys can treat
	// it as a gap of Seq-1 numbers.
	KeySeqFirst
	// KeySeqGap: the number jumps past the last one seen plus one;
	// Missing numbers were not seen (entries lost, not yet arrived,
	// cancelled in the outbox, or published to a topic this consumer does
	// not read). The key's last number becomes this one.
	KeySeqGap
	// KeySeqDuplicate: the number is at or below the last one seen: the
	// record was delivered before (at-least-once delivery), or, for a
	// number inside an earlier gap, it arrived late (a parked entry that
	// was requeued after later entries of its key were published). The
	// key's last number stays.
	KeySeqDuplicate
	// KeySeqUnnumbered: the record has no key, or no sequence header (an
	// entry without a key, or appended without KeySequence).
	KeySeqUnnumbered
	// KeySeqInvalid: the header's value is not a sequence number; Err
	// says why.
	KeySeqInvalid
)

var keySeqStatusNames = [...]string{"ok", "first", "gap", "duplicate", "unnumbered", "invalid"}

func (s KeySeqStatus) String() string {
	if s < 0 || int(s) >= len(keySeqStatusNames) {
		return fmt.Sprintf("KeySeqStatus(%d)", int(s))
	}
	return keySeqStatusNames[s]
}

// KeySeqResult is the verdict of [KeySeqChecker.Check] on one record.
type KeySeqResult struct {
	Status KeySeqStatus
	// Key is the record's key.
	Key string
	// Seq is the record's number (0 when unnumbered or invalid).
	Seq int64
	// Last is the key's last number seen before this record (0 when the
	// key was not remembered).
	Last int64
	// Missing is, for a gap, how many numbers were skipped: Seq-Last-1.
	Missing int64
	// Err is, for KeySeqInvalid, why the header did not parse.
	Err error
}

// KeySeqStats are the counts of a [KeySeqChecker] since it was made.
type KeySeqStats struct {
	// Records checked, by status.
	OK, First, Gaps, Duplicates, Unnumbered, Invalid int64
	// Missing is the sum of the gaps' Missing.
	Missing int64
	// Keys is the number of keys remembered now (at most MaxKeys).
	Keys int
	// Forgotten counts keys forgotten to stay within MaxKeys.
	Forgotten int64
}

// KeySeqCheckerOptions configure a [KeySeqChecker].
type KeySeqCheckerOptions struct {
	// MaxKeys bounds the keys remembered. When a new key would exceed it,
	// the key seen least recently is forgotten. Each remembered key costs
	// about 110 bytes plus the key's length (106 measured on amd64).
	// Default (0)
	// [DefaultKeySeqMaxKeys]; negative values are treated as 1.
	//
	// What forgetting means for detection: a forgotten key is checked from
	// scratch when it comes back, so its first record then is KeySeqOK (1)
	// or KeySeqFirst (above 1), never a gap or a duplicate: a gap or a
	// duplicate that spans the forgetting is missed. Size MaxKeys to the
	// number of keys that are active within the window you want to check
	// (a duplicate arrives within about one relay batch of the original,
	// a gap with the next record of its key).
	MaxKeys int
	// Header is the name of the header that carries the number. Default
	// outbox.HeaderKeySeq ("outbox-key-seq").
	Header string
}

// KeySeqChecker checks the per-key sequence numbers that an outbox backend
// with the KeySequence option puts into each keyed entry (header
// [outbox.HeaderKeySeq]) as a consumer reads them: for every key it
// remembers the last number seen and reports a record whose number is at
// or below it (a duplicate) or more than one above it (a gap), with
// memory bounded by [KeySeqCheckerOptions].MaxKeys (least recently seen
// keys are forgotten first).
//
// Feed it the records of a key in the order they were consumed; records
// of one key are in one Kafka partition, in order, as long as the sink's
// partitioner keys by record key (kgo's default) and the topic's partition
// count does not change. The numbers count every entry of the key in the
// outbox, whatever its topic: check a key only where all of its entries
// are consumed (one topic per key, or one checker over all of them when
// their order across topics does not matter to you). After a consumer
// group rebalance a consumer sees keys it does not remember
// (KeySeqFirst), and records replayed from the last committed offset as
// duplicates of what it saw before the rebalance, which they are.
//
// The zero value is not usable; call [NewKeySeqChecker]. It is safe for
// concurrent use.
type KeySeqChecker struct {
	mu     sync.Mutex
	max    int
	header string
	order  *list.List // of *keySeqState, least recently seen first
	keys   map[string]*list.Element
	stats  KeySeqStats
}

type keySeqState struct {
	key  string
	last int64
}

// NewKeySeqChecker returns a checker that remembers nothing yet.
func NewKeySeqChecker(opts KeySeqCheckerOptions) *KeySeqChecker {
	switch {
	case opts.MaxKeys == 0:
		opts.MaxKeys = DefaultKeySeqMaxKeys
	case opts.MaxKeys < 0:
		opts.MaxKeys = 1
	}
	if opts.Header == "" {
		opts.Header = outbox.HeaderKeySeq
	}
	return &KeySeqChecker{max: opts.MaxKeys, header: opts.Header, order: list.New(), keys: map[string]*list.Element{}}
}

// CheckRecord checks a consumed record: its key and the number in its
// sequence header. A record without a key or without the header is
// KeySeqUnnumbered; a header that does not parse is KeySeqInvalid. A nil
// record is KeySeqUnnumbered.
func (c *KeySeqChecker) CheckRecord(rec *kgo.Record) KeySeqResult {
	v, ok := Header(rec, c.header)
	if !ok || len(rec.Key) == 0 {
		c.count(KeySeqUnnumbered)
		return KeySeqResult{Status: KeySeqUnnumbered}
	}
	return c.CheckValue(string(rec.Key), v)
}

// CheckValue checks the header value v of a record with key key, for
// consumers that hold records in another form.
func (c *KeySeqChecker) CheckValue(key, v string) KeySeqResult {
	n, err := outbox.ParseKeySeq(v)
	if err != nil {
		c.count(KeySeqInvalid)
		return KeySeqResult{Status: KeySeqInvalid, Key: key, Err: err}
	}
	return c.Check(key, n)
}

// Check checks number seq of key. An empty key or a number below 1 is
// KeySeqUnnumbered (and not remembered).
func (c *KeySeqChecker) Check(key string, seq int64) KeySeqResult {
	if key == "" || seq < 1 {
		c.count(KeySeqUnnumbered)
		return KeySeqResult{Status: KeySeqUnnumbered, Key: key}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	r := KeySeqResult{Key: key, Seq: seq}
	el, ok := c.keys[key]
	if !ok {
		r.Status = KeySeqOK
		if seq > 1 {
			r.Status = KeySeqFirst
		}
		c.keys[key] = c.order.PushBack(&keySeqState{key: key, last: seq})
		for c.order.Len() > c.max {
			oldest := c.order.Front()
			c.order.Remove(oldest)
			delete(c.keys, oldest.Value.(*keySeqState).key)
			c.stats.Forgotten++
		}
		c.countLocked(r)
		return r
	}
	c.order.MoveToBack(el)
	st := el.Value.(*keySeqState)
	r.Last = st.last
	switch {
	case seq == st.last+1:
		r.Status = KeySeqOK
		st.last = seq
	case seq <= st.last:
		r.Status = KeySeqDuplicate
	default:
		r.Status = KeySeqGap
		r.Missing = seq - st.last - 1
		st.last = seq
	}
	c.countLocked(r)
	return r
}

// Stats returns the counts so far.
func (c *KeySeqChecker) Stats() KeySeqStats {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.stats
	s.Keys = c.order.Len()
	return s
}

// Forget forgets key (for example when its partition is revoked and will
// be consumed elsewhere); it is checked from scratch if it comes back.
func (c *KeySeqChecker) Forget(key string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.keys[key]; ok {
		c.order.Remove(el)
		delete(c.keys, key)
	}
}

func (c *KeySeqChecker) count(s KeySeqStatus) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.countLocked(KeySeqResult{Status: s})
}

func (c *KeySeqChecker) countLocked(r KeySeqResult) {
	switch r.Status {
	case KeySeqOK:
		c.stats.OK++
	case KeySeqFirst:
		c.stats.First++
	case KeySeqGap:
		c.stats.Gaps++
		c.stats.Missing += r.Missing
	case KeySeqDuplicate:
		c.stats.Duplicates++
	case KeySeqUnnumbered:
		c.stats.Unnumbered++
	case KeySeqInvalid:
		c.stats.Invalid++
	}
}
