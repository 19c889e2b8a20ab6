package redisoutbox

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sort"
	"time"
	"unsafe"

	"github.com/outboxrelay/outbox"
)

// Stored entry formats: the first byte of every stored entry.
//
// Format version 2 (written by this release). All integers big-endian. The
// first 33 bytes plus the error are written by the Lua scripts; the rest is
// written once by Go at append time and never changed:
//
//	off  size  field
//	0    1     version (2)
//	1    8     append sequence, per partition (also the first 8 bytes of
//	           the entry's sorted-set member, so equal scores order by it)
//	9    8     created-at, Unix microseconds, server clock
//	17   8     position, Unix ms: the entry's place in its key's order (its
//	           first due time: NotBefore, else the append time; the requeue
//	           time after a requeue); see the key-order set in docs/redis.md
//	25   4     attempts
//	29   4     n = length of the last error
//	33   n     last error
//	     4     length of key, then key
//	     4     length of topic, then topic
//	     8     not-before, Unix nanoseconds (0 = none)
//	     4     number of headers, then each: 4-byte name length, name,
//	           4-byte value length, value (sorted by name)
//	     rest  payload
//
// Format version 1 (earlier builds) is the same without the position field
// (attempts at offset 17, error length at 21, error at 25). This build
// still decodes it, and the scripts convert a version 1 entry to version 2
// (deriving the position from not-before or created-at) the first time they
// touch it; see "Upgrading from format 1" in docs/redis.md.
//
// Format version 3 is a quarantined value: laid out exactly as version 2,
// written only by the claim script when it parks a value it cannot use (it
// does not decode, or its topic is empty). Its key and topic are what could
// be read of the bad value ("" otherwise), its last error the reason, it
// has no not-before and no headers, and its payload is the raw bad value.
// decodeEntry reads it as version 2; the claim never hands it out and
// Requeue refuses it (see quarantine in lib.lua).
//
// lib.lua's parse checks exactly the structure decodeEntry checks, so any
// value the claim script hands out decodes in Go.
const (
	encodingV1          = 1
	encodingV2          = 2
	encodingQuarantined = 3
)

// headerLenV1 and fixedHeaderLen are the sizes of the script-managed
// header before the error in formats 1 and 2.
const (
	headerLenV1    = 25
	fixedHeaderLen = 33
)

// errCorrupt marks a stored entry that does not decode.
var errCorrupt = errors.New("redisoutbox: corrupt stored entry")

// encodeEntry encodes e for the append script: version 2 with the
// script-managed header zeroed (the script fills in sequence, created-at
// and position).
func encodeEntry(e *outbox.Entry) []byte {
	n := fixedHeaderLen + 4 + len(e.Key) + 4 + len(e.Topic) + 8 + 4 + len(e.Payload)
	names := make([]string, 0, len(e.Headers))
	for k, v := range e.Headers {
		names = append(names, k)
		n += 8 + len(k) + len(v)
	}
	sort.Strings(names)
	b := make([]byte, fixedHeaderLen, n)
	b[0] = encodingV2
	b = appendString(b, e.Key)
	b = appendString(b, e.Topic)
	var nb int64
	if !e.NotBefore.IsZero() {
		nb = e.NotBefore.UnixNano()
		if nb == 0 {
			nb = 1 // the epoch itself; 0 means "none"
		}
	}
	b = binary.BigEndian.AppendUint64(b, uint64(nb))
	b = binary.BigEndian.AppendUint32(b, uint32(len(names)))
	for _, k := range names {
		b = appendString(b, k)
		b = appendString(b, e.Headers[k])
	}
	return append(b, e.Payload...)
}

// encodeEntryKeySeq is encodeEntry for append_keyseq.lua: the header count
// includes outbox.HeaderKeySeq, whose name follows the entry's own headers
// (last, out of name order: decoders do not depend on the order; e must
// not set it, see outbox.CheckKeySeqHeaders), and off is the length of
// what comes before its value: the script inserts the value's length and
// the value there, before the payload.
func encodeEntryKeySeq(e *outbox.Entry) (blob []byte, off int) {
	b := encodeEntry(e)
	payloadAt := len(b) - len(e.Payload)
	// The header count is the 4 bytes before the first header; find it
	// from the fixed layout: fixed header, key, topic, not-before.
	countAt := fixedHeaderLen + 4 + len(e.Key) + 4 + len(e.Topic) + 8
	out := make([]byte, 0, len(b)+4+len(outbox.HeaderKeySeq)+4+20)
	out = append(out, b[:payloadAt]...)
	binary.BigEndian.PutUint32(out[countAt:], uint32(len(e.Headers))+1)
	out = appendString(out, outbox.HeaderKeySeq)
	off = len(out)
	return append(out, e.Payload...), off
}

func appendString(b []byte, s string) []byte {
	b = binary.BigEndian.AppendUint32(b, uint32(len(s)))
	return append(b, s...)
}

// decoder reads length-prefixed fields from a stored entry.
type decoder struct {
	b   []byte
	off int
	err error
}

func (d *decoder) fail(what string) {
	if d.err == nil {
		d.err = fmt.Errorf("%w: %s at byte %d of %d", errCorrupt, what, d.off, len(d.b))
	}
}

func (d *decoder) uint32(what string) uint32 {
	if d.err != nil {
		return 0
	}
	if len(d.b)-d.off < 4 {
		d.fail("truncated " + what)
		return 0
	}
	v := binary.BigEndian.Uint32(d.b[d.off:])
	d.off += 4
	return v
}

func (d *decoder) uint64(what string) uint64 {
	if d.err != nil {
		return 0
	}
	if len(d.b)-d.off < 8 {
		d.fail("truncated " + what)
		return 0
	}
	v := binary.BigEndian.Uint64(d.b[d.off:])
	d.off += 8
	return v
}

func (d *decoder) bytes(n uint32, what string) []byte {
	if d.err != nil {
		return nil
	}
	if uint64(len(d.b)-d.off) < uint64(n) {
		d.fail(what + " longer than the value")
		return nil
	}
	v := d.b[d.off : d.off+int(n)]
	d.off += int(n)
	return v
}

func (d *decoder) string(what string) string {
	return string(d.bytes(d.uint32(what+" length"), what))
}

// decodeEntry decodes a stored entry (format 1, 2 or 3). It never panics;
// a malformed value gives an error wrapping errCorrupt that names the field
// and the byte, with the entry's ID, partition, and its key and topic when
// they could be read. The returned entry does not share memory with b.
func decodeEntry(id string, partition int, b []byte) (outbox.Entry, error) {
	e := outbox.Entry{ID: id, Partition: partition}
	if len(b) == 0 {
		return e, fmt.Errorf("%w: empty value", errCorrupt)
	}
	if b[0] != encodingV1 && b[0] != encodingV2 && b[0] != encodingQuarantined {
		return e, fmt.Errorf("%w: unknown format version %d (this build reads versions 1, 2 and 3; upgrade the relay)", errCorrupt, b[0])
	}
	d := decoder{b: b, off: 1}
	d.uint64("sequence")
	created := int64(d.uint64("created-at"))
	if b[0] != encodingV1 {
		d.uint64("position")
	}
	attempts := d.uint32("attempts")
	e.LastError = d.string("last error")
	e.Key = d.string("key")
	e.Topic = d.string("topic")
	nb := int64(d.uint64("not-before"))
	nh := d.uint32("header count")
	if d.err == nil && nh > 0 {
		// Every header takes at least 8 bytes: bound the allocation by
		// what the value can hold.
		if uint64(nh)*8 > uint64(len(b)-d.off) {
			d.fail("header count larger than the value")
		} else {
			e.Headers = make(map[string]string, nh)
			for i := uint32(0); i < nh && d.err == nil; i++ {
				k := d.string("header name")
				v := d.string("header value")
				if d.err == nil {
					e.Headers[k] = v
				}
			}
		}
	}
	if d.err != nil {
		return outbox.Entry{ID: id, Partition: partition, Key: e.Key, Topic: e.Topic}, d.err
	}
	if rest := b[d.off:]; len(rest) > 0 {
		e.Payload = append([]byte(nil), rest...)
	}
	e.Attempts = int(attempts)
	if created != 0 {
		e.CreatedAt = time.UnixMicro(created)
	}
	if nb != 0 {
		e.NotBefore = time.Unix(0, nb)
	}
	return e, nil
}

// bytesOf returns the bytes of s without copying them, for decodeEntry,
// which only reads its input and copies what it keeps (the payload and
// every string). The result must never be written to.
func bytesOf(s string) []byte {
	return unsafe.Slice(unsafe.StringData(s), len(s))
}

// position returns the position of a format 2 entry (Unix ms: its first
// due time, see the format above), and false for a value of another format
// or too short to hold one.
func position(b []byte) (int64, bool) {
	if len(b) < fixedHeaderLen || b[0] != encodingV2 {
		return 0, false
	}
	return int64(binary.BigEndian.Uint64(b[17:25])), true
}
