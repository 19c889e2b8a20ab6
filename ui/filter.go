package ui

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/outboxrelay/outbox"
)

// filterJSON is FILTER of the package documentation, and the query
// parameters of /api/parked. An empty field filters nothing.
type filterJSON struct {
	Topic string `json:"topic"`
	Key   string `json:"key"`
	Error string `json:"error"`
	Since string `json:"since"`
	Until string `json:"until"`
}

// filter is a filterJSON parsed. Every field set must match.
type filter struct {
	topic, key, errText string // errText lower-cased
	since, until        time.Time
}

// parseFilter parses f; now is the reference of durations ago.
func parseFilter(f filterJSON, now time.Time) (filter, error) {
	out := filter{topic: f.Topic, key: f.Key, errText: strings.ToLower(f.Error)}
	var err error
	if f.Since != "" {
		if out.since, err = parseWhen(f.Since, now); err != nil {
			return out, fmt.Errorf("ui: since: %w", err)
		}
	}
	if f.Until != "" {
		if out.until, err = parseWhen(f.Until, now); err != nil {
			return out, fmt.Errorf("ui: until: %w", err)
		}
	}
	if !out.since.IsZero() && !out.until.IsZero() && !out.since.Before(out.until) {
		return out, fmt.Errorf("ui: since %s is not before until %s: nothing could match; swap them or widen the range",
			out.since.UTC().Format(time.RFC3339), out.until.UTC().Format(time.RFC3339))
	}
	return out, nil
}

// any reports whether any filter is set.
func (f filter) any() bool {
	return f.topic != "" || f.key != "" || f.errText != "" || !f.since.IsZero() || !f.until.IsZero()
}

// match reports whether e passes every filter: topic and key exactly, the
// error as a substring ignoring case, created at or after since and before
// until.
func (f filter) match(e outbox.Entry) bool {
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

// parseWhen parses a time: RFC 3339, a date or a date and time without a
// zone (UTC), or a duration before now (Go's forms, plus d for days).
func parseWhen(s string, now time.Time) (time.Time, error) {
	for _, layout := range []string{time.RFC3339Nano, "2006-01-02T15:04:05", "2006-01-02T15:04", "2006-01-02"} {
		if t, err := time.Parse(layout, s); err == nil {
			return t, nil
		}
	}
	d, err := time.ParseDuration(s)
	if n, ok := strings.CutSuffix(s, "d"); ok && err != nil {
		if days, derr := strconv.ParseFloat(n, 64); derr == nil && days >= 0 {
			return now.Add(-time.Duration(days * float64(24*time.Hour))), nil
		}
	}
	if err != nil || d < 0 {
		return time.Time{}, fmt.Errorf("%q is not a time: write RFC 3339 (2026-01-02T15:04:05Z), a date (2026-01-02, UTC), or a duration ago (90m, 24h, 7d)", s)
	}
	return now.Add(-d), nil
}
