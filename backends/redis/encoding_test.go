package redisoutbox

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/outboxrelay/outbox"
)

func TestEncodingRoundTrip(t *testing.T) {
	t.Parallel()
	for name, e := range map[string]outbox.Entry{
		"Minimal": {ID: "a", Topic: "t"},
		"Full": {ID: "b", Topic: "topic", Key: "key\x00with nul", Payload: []byte{0, 1, 2, 255},
			Headers:   map[string]string{"x": "1", "": "empty name survives decoding", "traceparent": "00-abc"},
			NotBefore: time.Unix(1700000000, 123456789)},
		"Epoch": {ID: "c", Topic: "t", NotBefore: time.Unix(0, 0)},
	} {
		t.Run(name, func(t *testing.T) {
			b := encodeEntry(&e)
			got, err := decodeEntry(e.ID, 3, b)
			require.NoError(t, err)
			assert.Equal(t, e.Topic, got.Topic)
			assert.Equal(t, e.Key, got.Key)
			assert.Equal(t, len(e.Payload) == 0, got.Payload == nil)
			if len(e.Payload) > 0 {
				assert.Equal(t, e.Payload, got.Payload)
			}
			if len(e.Headers) > 0 {
				assert.Equal(t, e.Headers, got.Headers)
			}
			assert.Equal(t, 3, got.Partition)
			if e.NotBefore.IsZero() {
				assert.True(t, got.NotBefore.IsZero())
			} else {
				assert.WithinDuration(t, e.NotBefore, got.NotBefore, time.Nanosecond)
			}
		})
	}
}

func TestDecodeRejectsMalformed(t *testing.T) {
	t.Parallel()
	good := encodeEntry(&outbox.Entry{ID: "a", Topic: "t", Key: "k", Headers: map[string]string{"h": "v"}})
	for name, b := range map[string][]byte{
		"Empty":          nil,
		"Version":        append([]byte{9}, good[1:]...),
		"ShortHeader":    good[:20],
		"CutInKey":       good[:fixedHeaderLen+5],
		"HugeHeaderNum":  func() []byte { c := bytes.Clone(good); c[fixedHeaderLen+4+1+4+1+8] = 0xff; return c }(),
		"CutInHeaderVal": good[:len(good)-1],
	} {
		_, err := decodeEntry("x", 0, b)
		assert.True(t, errors.Is(err, errCorrupt), "%s: %v", name, err)
	}
}

// FuzzDecode checks that the decoder never panics, that what it accepts
// re-encodes to the same bytes (apart from the script-managed header), and
// that it never allocates more than the input can describe. The seed
// corpus is in testdata/fuzz/FuzzDecode.
func FuzzDecode(f *testing.F) {
	f.Add(encodeEntry(&outbox.Entry{ID: "a", Topic: "t"}))
	f.Add(encodeEntry(&outbox.Entry{ID: "a", Topic: "t", Key: "k", Payload: []byte("p"), Headers: map[string]string{"a": "b", "c": "d"}, NotBefore: time.Unix(5, 0)}))
	f.Fuzz(func(t *testing.T, b []byte) {
		e, err := decodeEntry("id", 0, b)
		if err != nil {
			if !errors.Is(err, errCorrupt) {
				t.Fatalf("error does not wrap errCorrupt: %v", err)
			}
			return
		}
		// Rebuild the script-managed header and compare the rest.
		e.Attempts, e.LastError = 0, ""
		again := encodeEntry(&e)
		hl := fixedHeaderLen
		if b[0] == encodingV1 {
			hl = headerLenV1
		}
		errLen := int(b[hl-4])<<24 | int(b[hl-3])<<16 | int(b[hl-2])<<8 | int(b[hl-1])
		body := b[hl+errLen:]
		at := 4 + len(e.Key) + 4 + len(e.Topic) + 8
		stored := int(body[at])<<24 | int(body[at+1])<<16 | int(body[at+2])<<8 | int(body[at+3])
		if stored <= 1 && !bytes.Equal(again[fixedHeaderLen:], body) {
			// With several stored headers the stored order may differ
			// from the sorted order encodeEntry writes, and duplicates
			// collapse.
			t.Fatalf("re-encoding differs:\n got %x\nwant %x", again[fixedHeaderLen:], body)
		}
	})
}

func TestDecodeFormat1(t *testing.T) {
	t.Parallel()
	created := time.UnixMicro(1700000000123456)
	in := outbox.Entry{ID: "a", Topic: "t", Key: "k", Payload: []byte("p"), Headers: map[string]string{"h": "v"}, NotBefore: time.Unix(5, 0)}
	got, err := decodeEntry("a", 1, encodeV1(&in, 7, created))
	require.NoError(t, err)
	assert.Equal(t, "k", got.Key)
	assert.Equal(t, "t", got.Topic)
	assert.Equal(t, []byte("p"), got.Payload)
	assert.Equal(t, map[string]string{"h": "v"}, got.Headers)
	assert.True(t, got.CreatedAt.Equal(created))
	assert.True(t, got.NotBefore.Equal(in.NotBefore))
}

// A quarantined value (format 3, written by the claim when it parks a value
// it cannot use) decodes as format 2 does.
func TestDecodeQuarantined(t *testing.T) {
	t.Parallel()
	v := encodeEntry(&outbox.Entry{ID: "a", Topic: "t", Key: "k", Payload: []byte("raw")})
	v[0] = encodingQuarantined
	e, err := decodeEntry("a", 2, v)
	require.NoError(t, err)
	assert.Equal(t, "k", e.Key)
	assert.Equal(t, "t", e.Topic)
	assert.Equal(t, []byte("raw"), e.Payload)
	_, ok := position(v)
	assert.False(t, ok, "a quarantined value is never pending, it has no position to use")
}

// decodeEntry keeps the key and topic it could read of a malformed value,
// and names the field.
func TestDecodeKeepsWhatItRead(t *testing.T) {
	t.Parallel()
	v := encodeEntry(&outbox.Entry{ID: "a", Topic: "topic", Key: "k", Headers: map[string]string{"h": "v"}})
	for _, cr := range corruptions {
		t.Run(cr.name, func(t *testing.T) {
			e, err := decodeEntry("a", 1, cr.damage(v))
			if cr.name == "empty topic" {
				require.NoError(t, err)
				assert.Empty(t, e.Topic)
				return
			}
			require.ErrorIs(t, err, errCorrupt)
			assert.Contains(t, err.Error(), cr.want)
			assert.Equal(t, "a", e.ID)
			assert.Equal(t, 1, e.Partition)
			if cr.key {
				assert.Equal(t, "k", e.Key)
			} else {
				assert.Empty(t, e.Key)
			}
			if cr.topic {
				assert.Equal(t, "topic", e.Topic)
			} else {
				assert.Empty(t, e.Topic)
			}
		})
	}
}
