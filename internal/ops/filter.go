package ops

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/outboxrelay/outbox"
)

// The names of the time fields of a [FilterSpec], as [FieldError] and
// [RangeError] report them.
const (
	FieldSince = "since"
	FieldUntil = "until"
)

// FilterSpec is a filter of parked entries as an operator writes it. An
// empty field filters nothing. Since and Until take the forms of
// [ParseWhen].
type FilterSpec struct {
	Topic string // the entry's topic, exactly
	Key   string // the entry's key, exactly
	Error string // a substring of the entry's last error, ignoring case
	Since string // created at or after this time
	Until string // created before this time
}

// Filter is a parsed [FilterSpec]: every field set must match. The zero
// Filter matches every entry.
type Filter struct {
	topic, key, errText string // errText lower-cased
	errRaw              string // the error text as given, for ListFilter
	since, until        time.Time
}

// FieldError is the error of a [FilterSpec] field that does not parse.
// Field is [FieldSince] or [FieldUntil]; Err says what is wrong with the
// value, without naming the field, so that a front end can name it its
// own way.
type FieldError struct {
	Field string
	Err   error
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Err.Error() }

func (e *FieldError) Unwrap() error { return e.Err }

// RangeError is the error of a [FilterSpec] whose Since is not before its
// Until: nothing could match.
type RangeError struct {
	Since, Until time.Time
}

func (e *RangeError) Error() string {
	return fmt.Sprintf("since %s is not before until %s: nothing could match", e.Since.UTC().Format(time.RFC3339), e.Until.UTC().Format(time.RFC3339))
}

// ParseFilter parses s; now is the reference of durations ago. It returns
// a [*FieldError] for a time that does not parse and a [*RangeError] when
// Since is not before Until.
func ParseFilter(s FilterSpec, now time.Time) (Filter, error) {
	f := Filter{topic: s.Topic, key: s.Key, errText: strings.ToLower(s.Error), errRaw: s.Error}
	var err error
	if s.Since != "" {
		if f.since, err = ParseWhen(s.Since, now); err != nil {
			return f, &FieldError{Field: FieldSince, Err: err}
		}
	}
	if s.Until != "" {
		if f.until, err = ParseWhen(s.Until, now); err != nil {
			return f, &FieldError{Field: FieldUntil, Err: err}
		}
	}
	if !f.since.IsZero() && !f.until.IsZero() && !f.since.Before(f.until) {
		return f, &RangeError{Since: f.since, Until: f.until}
	}
	return f, nil
}

// Any reports whether any filter is set.
func (f Filter) Any() bool {
	return f.topic != "" || f.key != "" || f.errText != "" || !f.since.IsZero() || !f.until.IsZero()
}

// Match reports whether e passes every filter: topic and key exactly, the
// error as a substring ignoring case, created at or after since and before
// until.
func (f Filter) Match(e outbox.Entry) bool {
	switch {
	case f.topic != "" && e.Topic != f.topic,
		f.key != "" && e.Key != f.key,
		f.errText != "" && !strings.Contains(strings.ToLower(e.LastError), f.errText),
		!f.since.IsZero() && e.CreatedAt.Before(f.since),
		!f.until.IsZero() && !e.CreatedAt.Before(f.until):
		return false
	}
	return true
}

// Describe says what the filter selects, for prompts and summaries:
// `topic "orders", last error containing "timeout", created since
// 2026-01-02T00:00:00Z`; "" for the zero Filter.
func (f Filter) Describe() string {
	var parts []string
	if f.topic != "" {
		parts = append(parts, "topic "+strconv.Quote(f.topic))
	}
	if f.key != "" {
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

// whenLayouts are the timestamp forms [ParseWhen] takes, tried in order.
var whenLayouts = []string{time.RFC3339Nano, "2006-01-02T15:04:05", "2006-01-02 15:04:05", "2006-01-02T15:04", "2006-01-02"}

// ParseWhen parses a time: RFC 3339, a date or a date and time without a
// zone (UTC, with a T or a space between them), or a duration before now
// (Go's forms, such as 90m or 24h, plus d for days: 7d, 1.5d). A negative
// duration is refused.
func ParseWhen(s string, now time.Time) (time.Time, error) {
	for _, layout := range whenLayouts {
		if t, err := time.Parse(layout, s); err == nil {
			return t, nil
		}
	}
	d, err := ParseDuration(s)
	if err != nil {
		return time.Time{}, fmt.Errorf("%q is not a time: write RFC 3339 (2026-01-02T15:04:05Z), a date (2026-01-02, UTC), or a duration ago (90m, 24h, 7d)", s)
	}
	return now.Add(-d), nil
}

// maxDays is the most days [ParseDuration] takes: about the longest
// time.Duration (292 years).
const maxDays = 100000

// ParseDuration parses a duration as an operator writes it: Go's forms
// (90m, 36h, 1h30m) or a number of days (7d, 1.5d, up to 100000d). A
// negative duration is refused; the error says which forms it takes.
func ParseDuration(s string) (time.Duration, error) {
	if n, ok := strings.CutSuffix(s, "d"); ok {
		if days, err := strconv.ParseFloat(n, 64); err == nil && days >= 0 && days <= maxDays {
			return time.Duration(days * float64(24*time.Hour)), nil
		}
	} else if d, err := time.ParseDuration(s); err == nil && d >= 0 {
		return d, nil
	}
	return 0, fmt.Errorf("%q is not a duration: write a number of days (7d, 1.5d) or Go's form (90m, 36h, 1h30m), not negative", s)
}
