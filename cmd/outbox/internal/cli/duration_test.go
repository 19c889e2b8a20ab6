package cli

import (
	"strings"
	"testing"
	"time"
)

func TestDays(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want time.Duration
		str  string
	}{
		{"7d", 7 * 24 * time.Hour, "7d"},
		{"1.5d", 36 * time.Hour, "36h"},
		{"36h", 36 * time.Hour, "36h"},
		{"48h", 48 * time.Hour, "2d"},
		{"90m", 90 * time.Minute, "1h30m"},
		{"90s", 90 * time.Second, "1m30s"},
		{"0", 0, "0s"},
	} {
		var d Days
		if err := d.UnmarshalText([]byte(tc.in)); err != nil || d.Duration() != tc.want || d.String() != tc.str {
			t.Errorf("Days %q = %v (%q), %v; want %v (%q)", tc.in, d.Duration(), d.String(), err, tc.want, tc.str)
		}
	}
	var d Days
	if err := d.UnmarshalText([]byte("-7d")); err == nil || !strings.Contains(err.Error(), "7d") || d != 0 {
		t.Errorf("Days -7d: %v, %v; want a refusal naming the forms, and no change", d, err)
	}
}
