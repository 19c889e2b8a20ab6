package mysqloutbox

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/outboxrelay/outbox/internal/headercodec"
)

// FuzzCleanError: whatever a sink returns, MarkFailed stores valid UTF-8
// without NUL of at most maxErrorLen bytes, and a clean error that fits
// is stored as it is.
func FuzzCleanError(f *testing.F) {
	f.Add("timeout")
	f.Add(strings.Repeat("é", 3000))
	f.Add("a\x00b\xffc")
	f.Add(strings.Repeat("x", maxErrorLen-1) + "€")
	f.Fuzz(func(t *testing.T, s string) {
		c := cleanError(s)
		if len(c) > maxErrorLen || !utf8.ValidString(c) || strings.ContainsRune(c, 0) {
			t.Fatalf("cleanError(%q) = %q", s, c)
		}
		if len(s) <= maxErrorLen && utf8.ValidString(s) && !strings.ContainsRune(s, 0) && c != s {
			t.Fatalf("cleanError changed a storable error: %q -> %q", s, c)
		}
	})
}

// FuzzCheckRow: any stored headers bytes either decode (NULL to no map)
// or give a reason naming the headers column; an empty topic always
// gives a reason; nothing panics.
func FuzzCheckRow(f *testing.F) {
	f.Add("t", []byte(nil))
	f.Add("", headercodec.Encode(map[string]string{"a": "b"}))
	f.Add("t", []byte{0xde, 0xad, 0xbe, 0xef, 0x00, 0xff})
	f.Fuzz(func(t *testing.T, topic string, raw []byte) {
		c := checkRow(topic, raw, 0, 0)
		_, err := headercodec.Decode(pkgName, raw)
		if (err != nil) != strings.Contains(c.reason, "headers column") {
			t.Fatalf("decode error %v, reason %q", err, c.reason)
		}
		if (topic == "") != strings.Contains(c.reason, "empty topic column") {
			t.Fatalf("topic %q, reason %q", topic, c.reason)
		}
		if c.reason == "" && (c.headers == nil) != (raw == nil) {
			t.Fatalf("headers %x decoded to %v", raw, c.headers)
		}
	})
}
