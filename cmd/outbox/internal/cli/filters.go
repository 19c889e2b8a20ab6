package cli

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/outboxrelay/outbox/internal/ops"
)

// FilterFlags select parked entries (parked, requeue and cancel). Every
// filter given must match; none given matches every entry.
type FilterFlags struct {
	Topic string `placeholder:"TOPIC" noconfig:"" help:"Only entries of this topic."`
	Key   string `placeholder:"KEY" noconfig:"" help:"Only entries with this key."`
	Error string `placeholder:"TEXT" noconfig:"" help:"Only entries whose last error contains TEXT (ignoring case)."`
	Since string `placeholder:"TIME" noconfig:"" help:"Only entries created at or after TIME: RFC 3339 (2026-01-02T15:04:05Z), a date (2026-01-02, UTC), or a duration ago (90m, 24h, 7d)."`
	Until string `placeholder:"TIME" noconfig:"" help:"Only entries created before TIME (the forms of --since)."`
}

// Parse checks the flags; now is the reference of durations ago. Its
// errors name the flags.
func (ff FilterFlags) Parse(now time.Time) (ops.Filter, error) {
	f, err := ops.ParseFilter(ops.FilterSpec(ff), now)
	var field *ops.FieldError
	var rng *ops.RangeError
	switch {
	case errors.As(err, &field):
		return f, UsageError("--%s: %v", field.Field, field.Err)
	case errors.As(err, &rng):
		return f, UsageError("--since %s is not before --until %s: nothing could match", rng.Since.Format(time.RFC3339), rng.Until.Format(time.RFC3339))
	}
	return f, err
}

// ErrorWidth is how many characters of a last error list output shows.
const ErrorWidth = 200

// CutError shows a last error on one line in at most width runes. A long
// error keeps its beginning (which names the failure) and its end, where
// the Kafka sink puts its fix hint "(... ; create it, then requeue)": the
// middle goes, marked with " … ". It never cuts inside a rune.
func CutError(s string, width int) string {
	s = OneLine(s)
	r := []rune(s)
	if len(r) <= width {
		return s
	}
	const gap = " … "
	tail := width * 2 / 3
	// Keep a parenthesised hint at the end whole when it fits.
	if strings.HasSuffix(s, ")") {
		if i := strings.LastIndex(s, " ("); i >= 0 {
			if n := utf8.RuneCountInString(s[i:]); n > tail && n <= width-20 {
				tail = n
			}
		}
	}
	head := width - tail - utf8.RuneCountInString(gap)
	return strings.TrimSpace(string(r[:head])) + gap + strings.TrimSpace(string(r[len(r)-tail:]))
}

// OneLine collapses runs of white space (newlines included) into one
// space and makes control characters visible.
func OneLine(s string) string {
	return Printable(strings.Join(strings.Fields(s), " "))
}

// Printable escapes control characters and invalid UTF-8, so a stored
// string cannot move the cursor or recolour the terminal. Tabs and
// newlines are kept.
func Printable(s string) string {
	ok := true
	for _, r := range s {
		if r == utf8.RuneError || (unicode.IsControl(r) && r != '\n' && r != '\t') {
			ok = false
			break
		}
	}
	if ok {
		return s
	}
	var sb strings.Builder
	for i, w := 0, 0; i < len(s); i += w {
		r, size := utf8.DecodeRuneInString(s[i:])
		w = size
		switch {
		case r == utf8.RuneError && size <= 1:
			fmt.Fprintf(&sb, `\x%02x`, s[i])
		case unicode.IsControl(r) && r != '\n' && r != '\t':
			q := strconv.QuoteRune(r)
			sb.WriteString(q[1 : len(q)-1])
		default:
			sb.WriteRune(r)
		}
	}
	return sb.String()
}

// Cell makes a value fit one table cell: one line, visible characters,
// "-" for empty.
func Cell(s string) string {
	if s == "" {
		return "-"
	}
	return OneLine(s)
}
