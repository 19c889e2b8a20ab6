package cli

import (
	"errors"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/outboxrelay/outbox"
)

func TestCutError(t *testing.T) {
	t.Parallel()
	hint := "(the topic does not exist and was not created automatically; create it, then requeue the parked entry)"
	long := "kafkasink: publish entry e2: UNKNOWN_TOPIC_OR_PARTITION: " + strings.Repeat("é", 300) + " " + hint
	got := CutError(long, 200)
	if n := utf8.RuneCountInString(got); n > 200 || !utf8.ValidString(got) {
		t.Fatalf("cut to %d runes (valid UTF-8: %v): %q", n, utf8.ValidString(got), got)
	}
	if !strings.HasPrefix(got, "kafkasink: publish entry e2:") || !strings.HasSuffix(got, hint) || !strings.Contains(got, " … ") {
		t.Fatalf("cut error: %q", got)
	}
	// Without a hint: the start and the end, cut on rune boundaries.
	got = CutError(strings.Repeat("ü", 500), 100)
	if utf8.RuneCountInString(got) > 100 || !utf8.ValidString(got) {
		t.Fatalf("cut: %q", got)
	}
	if got := CutError("short\nerror", 200); got != "short error" {
		t.Fatalf("short error: %q", got)
	}
}

func TestFilterMatch(t *testing.T) {
	t.Parallel()
	now := time.Now()
	f, err := FilterFlags{Topic: "orders", Error: "TIMEOUT", Since: "1h"}.Parse(now)
	if err != nil {
		t.Fatal(err)
	}
	e := outbox.Entry{Topic: "orders", LastError: "read: timeout", CreatedAt: now.Add(-time.Minute)}
	if !f.Match(e) {
		t.Fatal("a matching entry does not match")
	}
	for _, miss := range []outbox.Entry{
		{Topic: "payments", LastError: "timeout", CreatedAt: now},
		{Topic: "orders", LastError: "refused", CreatedAt: now},
		{Topic: "orders", LastError: "timeout", CreatedAt: now.Add(-2 * time.Hour)},
	} {
		if f.Match(miss) {
			t.Errorf("%+v matches %s", miss, f.Describe())
		}
	}
	if _, err := (FilterFlags{Since: "1h", Until: "2h"}).Parse(now); err == nil {
		t.Error("--since after --until accepted")
	}
}

func TestPrintable(t *testing.T) {
	t.Parallel()
	if got := Printable("ok\ttab\nline"); got != "ok\ttab\nline" {
		t.Errorf("printable changed plain text: %q", got)
	}
	if got := Printable("a\x1b[31mred\x00\xff"); got != `a\x1b[31mred\x00\xff` {
		t.Errorf("printable: %q", got)
	}
}

// TestFilterFlagsErrorsNameTheFlags: the errors of internal/ops's filter
// come out naming the flags the operator typed.
func TestFilterFlagsErrorsNameTheFlags(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 5, 10, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		name  string
		flags FilterFlags
		want  string
	}{
		{"BadSince", FilterFlags{Since: "soon"}, `--since: "soon" is not a time: write RFC 3339`},
		{"BadUntil", FilterFlags{Until: "-5m"}, `--until: "-5m" is not a time`},
		{"SinceAfterUntil", FilterFlags{Since: "1h", Until: "2h"}, "--since 2026-05-10T11:00:00Z is not before --until 2026-05-10T10:00:00Z: nothing could match"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := tc.flags.Parse(now)
			var usage *ExitError
			if !errors.As(err, &usage) || usage.Code != 2 || !strings.HasPrefix(err.Error(), tc.want) {
				t.Errorf("parse(%+v): %v; want a usage error starting %q", tc.flags, err, tc.want)
			}
		})
	}
}
