package outbox

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"
)

// lineLog keeps each record as "LEVEL message k=v ...".
type lineLog struct {
	mu    sync.Mutex
	lines []string
}

func (h *lineLog) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelInfo }
func (h *lineLog) Handle(_ context.Context, r slog.Record) error {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s", r.Level, strings.TrimPrefix(r.Message, "outbox relay: "))
	r.Attrs(func(a slog.Attr) bool { fmt.Fprintf(&b, " %s=%v", a.Key, a.Value); return true })
	h.mu.Lock()
	defer h.mu.Unlock()
	h.lines = append(h.lines, b.String())
	return nil
}
func (h *lineLog) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *lineLog) WithGroup(string) slog.Handler      { return h }

func (h *lineLog) take() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := h.lines
	h.lines = nil
	return out
}

// storeLogClock is a storeLog over a clock the test moves.
func storeLogClock() (*storeLog, *lineLog, *time.Time) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	h := &lineLog{}
	s := newStoreLog(slog.New(h), func() time.Time { return now })
	s.every = 10 * time.Second
	return s, h, &now
}

func TestStoreLogSummarisesAnOutage(t *testing.T) {
	t.Parallel()
	s, h, now := storeLogClock()
	ctx := context.Background()
	down := errors.New("connection refused")
	for i := range 25 { // 25 s of failures, one per second, alternating partitions
		s.failed(ctx, opFetch, i%2, *now, down)
		*now = now.Add(time.Second)
	}
	s.ok(opFetch, 0) // partition 1 failed a second ago: still failing
	if got := h.take(); strings.Join(got, "\n") != strings.Join([]string{
		"WARN fetching a batch failed op=fetch partition=0 err=connection refused",
		"WARN fetching a batch is still failing op=fetch failures=10 partitions=2 failing_for=10s err=connection refused",
		"WARN fetching a batch is still failing op=fetch failures=10 partitions=2 failing_for=20s err=connection refused",
	}, "\n") {
		t.Fatalf("logged:\n%s", strings.Join(got, "\n"))
	}
	s.ok(opFetch, 1)
	if got := h.take(); len(got) != 1 || got[0] != "INFO fetching a batch works again op=fetch failed_for=25s failures=25" {
		t.Fatalf("at the end, logged %q", got)
	}
	s.ok(opFetch, 1)
	if got := h.take(); len(got) != 0 {
		t.Fatalf("a success after the end logged %q", got)
	}
}

// A partition that stops failing the kind without succeeding (its lease
// went to another relay) does not keep the outage open past the interval.
func TestStoreLogForgetsAPartitionNoLongerTried(t *testing.T) {
	t.Parallel()
	s, h, now := storeLogClock()
	ctx := context.Background()
	s.failed(ctx, opRenew, 3, *now, errors.New("timeout"))
	s.failed(ctx, opRenew, 4, *now, errors.New("timeout"))
	*now = now.Add(5 * time.Second)
	s.ok(opRenew, 3)
	if got := h.take(); len(got) != 1 {
		t.Fatalf("partition 4 failed 5 s ago, yet: %q", got)
	}
	*now = now.Add(5 * time.Second)
	s.ok(opRenew, 3)
	if got := h.take(); len(got) != 1 || !strings.HasPrefix(got[0], "INFO renewing a lease works again") {
		t.Fatalf("partition 4 was last tried an interval ago; logged %q", got)
	}
}

// Kinds are independent; a relay-wide kind has no partition attribute; a
// failure while stopping, or of a call begun before the kind worked again
// (a straggler of the outage that ended), opens no outage.
func TestStoreLogKindsStragglersAndStopping(t *testing.T) {
	t.Parallel()
	s, h, now := storeLogClock()
	ctx := context.Background()
	began := *now
	s.failed(ctx, opHeartbeat, noPartition, began, errors.New("x"))
	s.failed(ctx, opStats, noPartition, began, errors.New("y"))
	*now = now.Add(time.Second)
	s.ok(opHeartbeat, noPartition)
	s.failed(ctx, opHeartbeat, noPartition, began, errors.New("late")) // begun before the recovery
	stopped, cancel := context.WithCancel(ctx)
	cancel()
	s.failed(stopped, opLeave, noPartition, *now, context.Canceled)
	*now = now.Add(time.Second)
	s.failed(ctx, opHeartbeat, noPartition, *now, errors.New("again"))
	want := []string{
		"WARN recording the relay's heartbeat failed; keeping the partitions it holds op=heartbeat err=x",
		"WARN sampling the outbox's stats failed; the outbox gauges go stale op=stats err=y",
		"INFO recording the relay's heartbeat works again op=heartbeat failed_for=1s failures=1",
		"WARN recording the relay's heartbeat failed; keeping the partitions it holds op=heartbeat err=again",
	}
	if got := h.take(); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("logged:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
