package redisoutbox

import (
	"encoding/binary"
	"strconv"
	"testing"

	"github.com/outboxrelay/outbox"
)

// FuzzDecodeStoredValues checks the decoders of the Redis values other than
// entries (FuzzDecode covers those): decodeMember (a members hash record),
// parseLease (a lease key's value) and position (the head of an entry
// value). None may panic; what decodeMember accepts re-encodes to the same
// bytes, and what parseLease accepts re-parses to the same lease. The seed
// corpus is in testdata/fuzz/FuzzDecodeStoredValues.
func FuzzDecodeStoredValues(f *testing.F) {
	member := func(expires uint64, maxParts uint32, parts ...uint32) []byte {
		b := []byte{memberRecordV1}
		b = binary.BigEndian.AppendUint64(b, expires)
		b = binary.BigEndian.AppendUint32(b, maxParts)
		for _, p := range parts {
			b = binary.BigEndian.AppendUint32(b, p)
		}
		return b
	}
	f.Add("relay-1", member(1700000000000, 16))
	f.Add("relay-2", member(1700000000000, 16, 0, 3, 15))
	f.Add("", member(^uint64(0), ^uint32(0), ^uint32(0)))
	f.Add("x", []byte("7:relay-1"))
	f.Add("x", []byte("-1:a:b"))
	f.Add("x", []byte(":"))
	f.Add("x", []byte("\xde\xad\xbe\xef\x00\xff"))
	f.Add("x", encodeEntry(&outbox.Entry{ID: "a", Topic: "t", Key: "k"}))
	f.Fuzz(func(t *testing.T, owner string, b []byte) {
		if m, ok := decodeMember(owner, string(b)); ok {
			if m.Owner != owner {
				t.Fatalf("owner %q, want %q", m.Owner, owner)
			}
			again := []byte{memberRecordV1}
			again = binary.BigEndian.AppendUint64(again, uint64(m.Expires.UnixMilli()))
			again = binary.BigEndian.AppendUint32(again, uint32(m.MaxPartitions))
			for _, p := range m.Partitions {
				again = binary.BigEndian.AppendUint32(again, uint32(p))
			}
			if string(again) != string(b) {
				t.Fatalf("member record re-encodes differently:\n got %x\nwant %x", again, b)
			}
		}
		if l, err := parseLease(3, string(b)); err == nil {
			if l.Owner == "" || l.Partition != 3 {
				t.Fatalf("accepted lease %+v", l)
			}
			l2, err := parseLease(3, strconv.FormatInt(l.Version, 10)+":"+l.Owner)
			if err != nil || l2 != l {
				t.Fatalf("lease %+v does not re-parse: %+v, %v", l, l2, err)
			}
		}
		position(b)
	})
}
