package cli

import (
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/outboxrelay/outbox"
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

// Filter is FilterFlags parsed.
type Filter struct {
	topic, key, errText string
	hasTopic, hasKey    bool
	since, until        time.Time
}

// Any reports whether any filter is set.
func (f Filter) Any() bool {
	return f.hasTopic || f.hasKey || f.errText != "" || !f.since.IsZero() || !f.until.IsZero()
}

// Parse checks the flags; now is the reference of durations ago.
func (ff FilterFlags) Parse(now time.Time) (Filter, error) {
	f := Filter{topic: ff.Topic, key: ff.Key, errText: strings.ToLower(ff.Error), hasTopic: ff.Topic != "", hasKey: ff.Key != ""}
	var err error
	if ff.Since != "" {
		if f.since, err = ParseWhen(ff.Since, now); err != nil {
			return f, UsageError("--since: %v", err)
		}
	}
	if ff.Until != "" {
		if f.until, err = ParseWhen(ff.Until, now); err != nil {
			return f, UsageError("--until: %v", err)
		}
	}
	if !f.since.IsZero() && !f.until.IsZero() && !f.since.Before(f.until) {
		return f, UsageError("--since %s is not before --until %s: nothing could match", f.since.Format(time.RFC3339), f.until.Format(time.RFC3339))
	}
	return f, nil
}

// Match reports whether e passes every filter.
func (f Filter) Match(e outbox.Entry) bool {
	switch {
	case f.hasTopic && e.Topic != f.topic,
		f.hasKey && e.Key != f.key,
		f.errText != "" && !strings.Contains(strings.ToLower(e.LastError), f.errText),
		!f.since.IsZero() && e.CreatedAt.Before(f.since),
		!f.until.IsZero() && !e.CreatedAt.Before(f.until):
		return false
	}
	return true
}

// Describe says what the filter selects, for prompts and summaries.
func (f Filter) Describe() string {
	var parts []string
	if f.hasTopic {
		parts = append(parts, "topic "+strconv.Quote(f.topic))
	}
	if f.hasKey {
		parts = append(parts, "key "+strconv.Quote(f.key))
	}
	if f.errText != "" {
		parts = append(parts, "last error containing "+strconv.Quote(f.errText))
	}
	if !f.since.IsZero() {
		parts = append(parts, "created since "+f.since.UTC().Format(time.RFC3339))
	}
	if !f.until.IsZero() {
		parts = append(parts, "created before "+f.until.UTC().Format(time.RFC3339))
	}
	return strings.Join(parts, ", ")
}

// ParseWhen parses a time: RFC 3339, a date or a date and time without a
// zone (UTC), or a duration before now (Go's forms, plus d for days).
func ParseWhen(s string, now time.Time) (time.Time, error) {
	for _, layout := range []string{time.RFC3339Nano, "2006-01-02T15:04:05", "2006-01-02 15:04:05", "2006-01-02T15:04", "2006-01-02"} {
		if t, err := time.Parse(layout, s); err == nil {
			return t, nil
		}
	}
	d, err := time.ParseDuration(s)
	if n, ok := strings.CutSuffix(s, "d"); ok && err != nil {
		days, derr := strconv.ParseFloat(n, 64)
		if derr == nil && days >= 0 {
			return now.Add(-time.Duration(days * float64(24*time.Hour))), nil
		}
	}
	if err != nil || d < 0 {
		return time.Time{}, fmt.Errorf("%q is not a time: write RFC 3339 (2026-01-02T15:04:05Z), a date (2026-01-02, UTC), or a duration ago (90m, 24h, 7d)", s)
	}
	return now.Add(-d), nil
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
