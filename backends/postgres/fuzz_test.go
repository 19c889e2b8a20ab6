package pgoutbox_test

import (
	"maps"
	"testing"

	pgoutbox "github.com/outboxrelay/outbox/backends/postgres"
)

// FuzzDecodeHeaders checks that DecodeHeaders never panics on a headers
// column value, and that what it accepts re-encodes with EncodeHeaders to
// bytes that decode to the same map. The seed corpus is in
// testdata/fuzz/FuzzDecodeHeaders.
func FuzzDecodeHeaders(f *testing.F) {
	for _, h := range []map[string]string{
		{},
		{"a": "b"},
		{"content-type": "application/json", "trace": "00-abc-01"},
		{"": "", "nul\x00": "\xff\xfe"},
		{"k": string(make([]byte, 300))},
	} {
		f.Add(pgoutbox.EncodeHeaders(h))
	}
	f.Add([]byte("\xde\xad\xbe\xef\x00\xff"))
	f.Add([]byte{0x01})
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01})
	f.Add([]byte{0x80})
	f.Fuzz(func(t *testing.T, raw []byte) {
		h, err := pgoutbox.DecodeHeaders(raw)
		if err != nil {
			if h != nil {
				t.Fatalf("error %v with a non-nil map %v", err, h)
			}
			return
		}
		if (raw == nil) != (h == nil) {
			t.Fatalf("raw nil %v, decoded nil %v", raw == nil, h == nil)
		}
		again, err := pgoutbox.DecodeHeaders(pgoutbox.EncodeHeaders(h))
		if err != nil {
			t.Fatalf("re-encoded headers do not decode: %v", err)
		}
		if !maps.Equal(h, again) || (h == nil) != (again == nil) {
			t.Fatalf("round trip differs:\n got %q\nwant %q", again, h)
		}
	})
}
