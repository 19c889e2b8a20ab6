package headercodec_test

import (
	"maps"
	"strings"
	"testing"

	"github.com/outboxrelay/outbox/internal/headercodec"
)

func TestRoundTrip(t *testing.T) {
	t.Parallel()
	for _, h := range []map[string]string{nil, {}, {"a": "", "\x00": "\xff\x00", "ключ": "значение"}, {"k": strings.Repeat("v", 300)}} {
		got, err := headercodec.Decode("x", headercodec.Encode(h))
		if err != nil {
			t.Fatal(err)
		}
		if (got == nil) != (h == nil) || !maps.Equal(got, h) {
			t.Fatalf("round trip of %q gave %q", h, got)
		}
	}
}

func TestEncodeIsSortedAndExact(t *testing.T) {
	t.Parallel()
	got := headercodec.Encode(map[string]string{"b": "2", "a": "1"})
	if want := "\x01a\x011\x01b\x012"; string(got) != want {
		t.Fatalf("Encode = %q, want %q", got, want)
	}
	if got := headercodec.Encode(map[string]string{}); got == nil || len(got) != 0 {
		t.Fatalf("Encode of an empty map = %#v, want an empty non-nil slice", got)
	}
}

func TestDecodeRejectsOverruns(t *testing.T) {
	t.Parallel()
	for _, raw := range [][]byte{{5, 'a'}, {1, 'a'}, {1, 'a', 3, 'v'}, {0x80}, {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}} {
		h, err := headercodec.Decode("mysqloutbox", raw)
		if err == nil || h != nil {
			t.Fatalf("Decode(%q) = %q, %v; want a nil map and an error", raw, h, err)
		}
		want := "mysqloutbox: corrupt headers column: a length runs past the end; was it written by something other than mysqloutbox?"
		if err.Error() != want {
			t.Fatalf("Decode(%q) error %q, want %q", raw, err, want)
		}
		reason := headercodec.Reason("mysqloutbox", err, "fix it")
		if want := want + "; the stored bytes cannot be decoded, so the entry cannot be published; fix it"; reason != want {
			t.Fatalf("Reason = %q, want %q", reason, want)
		}
	}
}
