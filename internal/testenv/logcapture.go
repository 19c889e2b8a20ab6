package testenv

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
)

// LogCapture is a slog.Handler that keeps every record, for tests that
// count what a relay or a backend logs. It is safe for concurrent use.
type LogCapture struct {
	mu      sync.Mutex
	records []slog.Record
}

// Enabled implements slog.Handler: every level is kept.
func (h *LogCapture) Enabled(context.Context, slog.Level) bool { return true }

// Handle implements slog.Handler.
func (h *LogCapture) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.records = append(h.records, r.Clone())
	return nil
}

// WithAttrs implements slog.Handler; the attributes are dropped.
func (h *LogCapture) WithAttrs([]slog.Attr) slog.Handler { return h }

// WithGroup implements slog.Handler; the group is dropped.
func (h *LogCapture) WithGroup(string) slog.Handler { return h }

// Attrs returns the attributes, as strings, of each record of level whose
// message match accepts, in the order they were logged.
func (h *LogCapture) Attrs(level slog.Level, match func(msg string) bool) []map[string]string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []map[string]string
	for _, r := range h.records {
		if r.Level == level && match(r.Message) {
			a := map[string]string{}
			r.Attrs(func(at slog.Attr) bool { a[at.Key] = at.Value.String(); return true })
			out = append(out, a)
		}
	}
	return out
}

// String lists every record kept, one per line, for a failing test's log.
func (h *LogCapture) String() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var b strings.Builder
	for _, r := range h.records {
		fmt.Fprintf(&b, "%s %s %s", r.Time.Format("15:04:05.000"), r.Level, r.Message)
		r.Attrs(func(a slog.Attr) bool { fmt.Fprintf(&b, " %s=%v", a.Key, a.Value); return true })
		b.WriteByte('\n')
	}
	return b.String()
}
