package demo

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"

	"github.com/outboxrelay/outbox"
	"github.com/outboxrelay/outbox/backoff"
)

// errInjected marks the failures the demo injects.
var errInjected = errors.New("injected")

// faultySink injects broker failures in front of the broker's sink:
// permanent ones for the poison entries, transient ones (with the text
// fault, as the broker's client would say it) where the plan says
// (failsOnPurpose, by entry and attempt).
type faultySink struct {
	next  outbox.Sink
	fault string
	w     *world
}

func (s *faultySink) Publish(ctx context.Context, msgs []outbox.Entry) []error {
	p := s.w.plan
	errs := make([]error, len(msgs))
	var pass []outbox.Entry
	var at []int
	for i, m := range msgs {
		s.w.attempts.Add(1)
		idx, ok := p.byID[m.ID]
		switch {
		case ok && p.entries[idx].poison:
			errs[i] = backoff.Permanent(fmt.Errorf("broker: record rejected (%w poison entry)", errInjected))
		case ok && p.failsOnPurpose(idx, m.Attempts):
			s.w.injected.Add(1)
			s.w.mu.Lock()
			s.w.failedAt[[2]int{idx, m.Attempts}] = true
			s.w.mu.Unlock()
			errs[i] = fmt.Errorf("broker: %s (%w)", s.fault, errInjected)
		default:
			pass, at = append(pass, m), append(at, i)
		}
	}
	if len(pass) > 0 {
		for j, err := range s.next.Publish(ctx, pass) {
			errs[at[j]] = err
		}
	}
	return errs
}

// relayLog receives the relays' and backends' warnings and errors (they
// print nothing): it remembers the last one that is not about an injected
// failure, for the timeout message, and ends the run on an error the
// relays would otherwise retry forever (a prepared statement PgBouncer
// lost).
type relayLog struct {
	fatal func(error)

	mu   sync.Mutex
	last string
}

func (h *relayLog) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelWarn }

func (h *relayLog) WithAttrs([]slog.Attr) slog.Handler { return h }

func (h *relayLog) WithGroup(string) slog.Handler { return h }

func (h *relayLog) Handle(_ context.Context, r slog.Record) error {
	var err error
	r.Attrs(func(a slog.Attr) bool {
		if e, ok := a.Value.Any().(error); ok && a.Key == "err" {
			err = e
		}
		return true
	})
	if err == nil || errors.Is(err, errInjected) || errors.Is(err, context.Canceled) {
		return nil
	}
	if isPreparedStatementError(err) {
		h.fatal(fmt.Errorf("demo: %s: %w", r.Message, err))
	}
	h.mu.Lock()
	h.last = r.Message + ": " + err.Error()
	h.mu.Unlock()
	return nil
}

func (h *relayLog) lastError() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.last
}
