package inbox_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"go.opentelemetry.io/otel/metric/noop"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/outboxrelay/outbox/inbox"
	"github.com/outboxrelay/outbox/internal/testenv"
)

// purgeCounter is a Memory that notes each Purge call's limit and can
// fail them.
type purgeCounter struct {
	*inbox.Memory
	mu     sync.Mutex
	limits []int
	at     []time.Time
	fail   error
	delay  time.Duration // each Purge takes this long
}

func (p *purgeCounter) Purge(ctx context.Context, before time.Time, limit int) (int, int, error) {
	p.mu.Lock()
	p.limits = append(p.limits, limit)
	p.at = append(p.at, time.Now())
	fail, delay := p.fail, p.delay
	p.mu.Unlock()
	time.Sleep(delay)
	if fail != nil {
		return 0, 0, fail
	}
	return p.Memory.Purge(ctx, before, limit)
}

func (p *purgeCounter) calls() ([]int, []time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.limits), slices.Clone(p.at)
}

// fill records ids id-0..id-(n-1) and sets keys key-0..key-(k-1), then
// backdates them by age.
func fill(t *testing.T, s *inbox.Memory, n, k int, age time.Duration) {
	t.Helper()
	var ids, keys []string
	seqs := map[string]int64{}
	for i := range n {
		ids = append(ids, fmt.Sprintf("id-%d", i))
	}
	for i := range k {
		keys = append(keys, fmt.Sprintf("key-%d", i))
		seqs[keys[i]] = 1
	}
	err := s.InTx(t.Context(), func(ctx context.Context, tx *inbox.MemoryTx) error {
		if _, err := s.Record(ctx, tx, ids); err != nil {
			return err
		}
		return s.SetKeySeqs(ctx, tx, seqs)
	})
	if err != nil {
		t.Fatal(err)
	}
	s.Backdate(age, ids, keys)
}

func TestJanitorRetentionRequired(t *testing.T) {
	t.Parallel()
	s := inbox.NewMemory()
	for _, o := range []inbox.JanitorOptions{
		{}, {Retention: -time.Hour}, {Retention: time.Hour, BatchSize: -1}, {Retention: time.Hour, Pause: -1}, {Retention: time.Hour, Interval: -1},
	} {
		if _, _, err := inbox.PurgeOnce(t.Context(), s, o); !errors.Is(err, inbox.ErrInvalidArgument) {
			t.Errorf("PurgeOnce(%+v) = %v, want ErrInvalidArgument", o, err)
		}
		if err := inbox.RunJanitor(t.Context(), s, o); !errors.Is(err, inbox.ErrInvalidArgument) {
			t.Errorf("RunJanitor(%+v) = %v, want ErrInvalidArgument", o, err)
		}
	}
}

// TestPurgeOnceBatchesAndPauses: 25 old IDs and 12 old keys in batches of
// 10: three Purge calls (10+10+5 IDs), Pause between them, the new
// records kept.
func TestPurgeOnceBatchesAndPauses(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		s := &purgeCounter{Memory: inbox.NewMemory()}
		fill(t, s.Memory, 25, 12, 2*time.Hour)
		if got := recordIDs(t, s.Memory, "fresh"); !got[0] {
			t.Fatalf("Record(fresh) = %v", got)
		}
		start := time.Now()
		ids, keys, err := inbox.PurgeOnce(t.Context(), s, inbox.JanitorOptions{
			Retention: time.Hour, BatchSize: 10, Pause: 3 * time.Second, MeterProvider: noop.NewMeterProvider(), Logger: quiet,
		})
		if err != nil || ids != 25 || keys != 12 {
			t.Fatalf("PurgeOnce = %d IDs, %d keys, %v; want 25, 12, nil", ids, keys, err)
		}
		if got := recordIDs(t, s.Memory, "fresh", "id-0"); !slices.Equal(got, []bool{false, true}) {
			t.Errorf("Record(fresh, id-0) after the purge = %v, want fresh kept and id-0 gone", got)
		}
		limits, at := s.calls()
		if !slices.Equal(limits, []int{10, 10, 10}) {
			t.Errorf("Purge limits = %v, want three calls of 10", limits)
		}
		for i, a := range at {
			if want := start.Add(time.Duration(i) * 3 * time.Second); !a.Equal(want) {
				t.Errorf("Purge %d at %v after the start, want %v (Pause between batches)", i, a.Sub(start), want.Sub(start))
			}
		}
	})
}

// recordIDs records ids in a committed transaction.
func recordIDs(t *testing.T, s *inbox.Memory, ids ...string) []bool {
	t.Helper()
	var fresh []bool
	err := s.InTx(t.Context(), func(ctx context.Context, tx *inbox.MemoryTx) error {
		var err error
		fresh, err = s.Record(ctx, tx, ids)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return fresh
}

func TestPurgeOnceDefaults(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		s := &purgeCounter{Memory: inbox.NewMemory()}
		fill(t, s.Memory, 1500, 0, 8*24*time.Hour)
		start := time.Now()
		ids, _, err := inbox.PurgeOnce(t.Context(), s, inbox.JanitorOptions{Retention: 7 * 24 * time.Hour, MeterProvider: noop.NewMeterProvider()})
		if err != nil || ids != 1500 {
			t.Fatalf("PurgeOnce = %d, %v", ids, err)
		}
		if limits, _ := s.calls(); !slices.Equal(limits, []int{1000, 1000}) {
			t.Errorf("Purge limits = %v, want the default BatchSize 1000, twice", limits)
		}
		if d := time.Since(start); d != 50*time.Millisecond {
			t.Errorf("PurgeOnce took %v, want one default Pause (50ms)", d)
		}
	})
}

// TestRunJanitorRoundsLogsAndStops: a round at once and one per Interval,
// a line per round that removed something, an error line for a failed
// round (and the next round tried), nil when the context ends.
func TestRunJanitorRoundsLogsAndStops(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		logs := &testenv.LogCapture{}
		s := &purgeCounter{Memory: inbox.NewMemory()}
		fill(t, s.Memory, 3, 2, 2*time.Hour)
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() {
			done <- inbox.RunJanitor(ctx, s, inbox.JanitorOptions{
				Retention: time.Hour, Interval: time.Minute, Logger: slog.New(logs), MeterProvider: noop.NewMeterProvider(),
			})
		}()
		synctest.Wait() // the first round ran; the janitor waits for the next
		removed := logs.Attrs(slog.LevelInfo, func(m string) bool { return m == "inbox: janitor removed old records" })
		if len(removed) != 1 || removed[0]["ids"] != "3" || removed[0]["keys"] != "2" {
			t.Fatalf("after the first round: info lines %v, want one with ids 3, keys 2\n%s", removed, logs)
		}
		s.mu.Lock()
		s.fail = errors.New("store down")
		s.mu.Unlock()
		time.Sleep(time.Minute)
		synctest.Wait()
		failed := logs.Attrs(slog.LevelError, func(m string) bool {
			return m == "inbox: janitor round failed; trying again at the next interval"
		})
		if len(failed) != 1 || failed[0]["err"] != "inbox: purge: store down" {
			t.Fatalf("after a failing round: error lines %v, want one\n%s", failed, logs)
		}
		time.Sleep(time.Minute)
		synctest.Wait()
		if limits, _ := s.calls(); len(limits) != 3 {
			t.Errorf("%d Purge calls after three rounds, want 3", len(limits))
		}
		cancel()
		if err := <-done; err != nil {
			t.Fatalf("RunJanitor after its context ended = %v, want nil", err)
		}
		if n := len(logs.Attrs(slog.LevelInfo, func(string) bool { return true })); n != 1 {
			t.Errorf("%d info lines, want 1: rounds that removed nothing stay quiet\n%s", n, logs)
		}
	})
}

func TestPurgeOnceContextErrorUnwrapped(t *testing.T) {
	t.Parallel()
	s := inbox.NewMemory()
	fill(t, s, 3, 0, 2*time.Hour)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, _, err := inbox.PurgeOnce(ctx, s, inbox.JanitorOptions{Retention: time.Hour, MeterProvider: noop.NewMeterProvider()}); err != context.Canceled {
		t.Fatalf("PurgeOnce with an ended context = %v, want context.Canceled itself", err)
	}
	if got := recordIDs(t, s, "id-0"); got[0] {
		t.Error("id-0 purged by a PurgeOnce whose context had ended")
	}
}

// TestPurgeOnceWaitsAsLongAsTheBatchTook: a batch that takes longer than
// Pause is followed by a wait as long as it took, so the janitor holds the
// store at most half the time.
func TestPurgeOnceWaitsAsLongAsTheBatchTook(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		s := &purgeCounter{Memory: inbox.NewMemory(), delay: 4 * time.Second}
		fill(t, s.Memory, 25, 0, 2*time.Hour)
		start := time.Now()
		ids, _, err := inbox.PurgeOnce(t.Context(), s, inbox.JanitorOptions{
			Retention: time.Hour, BatchSize: 10, Pause: time.Second, MeterProvider: noop.NewMeterProvider(), Logger: quiet,
		})
		if err != nil || ids != 25 {
			t.Fatalf("PurgeOnce = %d IDs, %v; want 25, nil", ids, err)
		}
		_, at := s.calls()
		if len(at) != 3 {
			t.Fatalf("%d Purge calls, want 3", len(at))
		}
		for i, a := range at {
			if want := start.Add(time.Duration(i) * 8 * time.Second); !a.Equal(want) {
				t.Errorf("Purge %d at %v after the start, want %v (a 4s batch, then a 4s wait, not the 1s Pause)", i, a.Sub(start), want.Sub(start))
			}
		}
	})
}

// oldestAge is the MetricOldestAge gauge's value, and whether it is
// exported.
func oldestAge(t *testing.T, reader *sdkmetric.ManualReader) (float64, bool) {
	t.Helper()
	m, ok := collect(t, reader)[inbox.MetricOldestAge]
	if !ok {
		return 0, false
	}
	g, ok := m.Data.(metricdata.Gauge[float64])
	if !ok {
		t.Fatalf("%s is %T, want a float64 gauge", inbox.MetricOldestAge, m.Data)
	}
	if len(g.DataPoints) != 1 {
		t.Fatalf("%s has %d data points, want 1", inbox.MetricOldestAge, len(g.DataPoints))
	}
	return g.DataPoints[0].Value, true
}

// TestInboxRunJanitorOldestAge: Inbox.RunJanitor reports through the
// inbox's MeterProvider; after each round the gauge is the age of the
// oldest record left, aging between rounds, absent once the store is
// empty and once the janitor stopped.
func TestInboxRunJanitorOldestAge(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		reader := sdkmetric.NewManualReader()
		s := inbox.NewMemory()
		ib, err := inbox.New(s, inbox.Options{Logger: quiet, MeterProvider: sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))})
		if err != nil {
			t.Fatal(err)
		}
		recordIDs(t, s, "old", "kept")
		s.Backdate(2*time.Hour, []string{"old"}, nil)
		s.Backdate(30*time.Minute, []string{"kept"}, nil)
		if _, ok := oldestAge(t, reader); ok {
			t.Fatalf("%s exported before a janitor ran", inbox.MetricOldestAge)
		}
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() { done <- ib.RunJanitor(ctx, inbox.JanitorOptions{Retention: time.Hour, Interval: time.Minute}) }()
		synctest.Wait()
		if age, ok := oldestAge(t, reader); !ok || age != 1800 {
			t.Fatalf("%s after the first round = %v (exported %v), want 1800: kept, 30 minutes old", inbox.MetricOldestAge, age, ok)
		}
		if n := sum(t, collect(t, reader), inbox.MetricPurged, "kind", "id"); n != 1 {
			t.Errorf("%s id = %d through the inbox's MeterProvider, want 1", inbox.MetricPurged, n)
		}
		time.Sleep(10 * time.Second)
		if age, _ := oldestAge(t, reader); age != 1810 {
			t.Errorf("%s 10s later = %v, want 1810", inbox.MetricOldestAge, age)
		}
		s.Backdate(time.Hour, []string{"kept"}, nil)
		time.Sleep(time.Minute)
		synctest.Wait()
		if age, ok := oldestAge(t, reader); ok {
			t.Errorf("%s after a round that emptied the store = %v, want absent", inbox.MetricOldestAge, age)
		}
		recordIDs(t, s, "new")
		time.Sleep(time.Minute)
		synctest.Wait()
		if age, ok := oldestAge(t, reader); !ok || age != 60 {
			t.Errorf("%s after a round with a record written a minute before = %v (exported %v), want 60", inbox.MetricOldestAge, age, ok)
		}
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if age, ok := oldestAge(t, reader); ok {
			t.Errorf("%s after the janitor stopped = %v, want absent", inbox.MetricOldestAge, age)
		}
	})
}

// failingOldest is a Memory whose Oldest fails.
type failingOldest struct{ *inbox.Memory }

func (failingOldest) Oldest(context.Context) (time.Time, bool, error) {
	return time.Time{}, false, errors.New("store down")
}

// TestRunJanitorOldestFails: a failed Oldest is logged and leaves the
// gauge absent; the purge still runs.
func TestRunJanitorOldestFails(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		reader := sdkmetric.NewManualReader()
		logs := &testenv.LogCapture{}
		s := failingOldest{inbox.NewMemory()}
		fill(t, s.Memory, 2, 0, 2*time.Hour)
		recordIDs(t, s.Memory, "new")
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() {
			done <- inbox.RunJanitor(ctx, s, inbox.JanitorOptions{Retention: time.Hour, Logger: slog.New(logs),
				MeterProvider: sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))})
		}()
		synctest.Wait()
		if age, ok := oldestAge(t, reader); ok {
			t.Errorf("%s after a failed Oldest = %v, want absent", inbox.MetricOldestAge, age)
		}
		warned := logs.Attrs(slog.LevelWarn, func(m string) bool { return strings.Contains(m, "oldest") })
		if len(warned) != 1 || warned[0]["err"] != "store down" {
			t.Errorf("warnings about the oldest record = %v, want one with err store down\n%s", warned, logs)
		}
		if n := sum(t, collect(t, reader), inbox.MetricPurged, "kind", "id"); n != 2 {
			t.Errorf("%s id = %d, want 2", inbox.MetricPurged, n)
		}
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	})
}
