package inbox_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"go.opentelemetry.io/otel/metric/noop"

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
}

func (p *purgeCounter) Purge(ctx context.Context, before time.Time, limit int) (int, int, error) {
	p.mu.Lock()
	p.limits = append(p.limits, limit)
	p.at = append(p.at, time.Now())
	fail := p.fail
	p.mu.Unlock()
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
