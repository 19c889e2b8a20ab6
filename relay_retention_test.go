package outbox_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/outboxrelay/outbox"
	"github.com/outboxrelay/outbox/backends/memory"
)

// janitorStore is a test double of the SPI's ArchiveJanitor over a memory
// backend (which keeps no archive): it records each call with the time it
// began and ended, and PurgeArchiveBatch reports removals from a count of
// "archived" rows the test sets. Optional hooks let a test block a call,
// make it take time, or fail it. Renewals of partition 0's lease fail
// with ErrLeaseLost, and its acquisitions with ErrLeaseHeld, while lose is
// set, as when another relay took the partition.
type janitorStore struct {
	*memory.Backend
	lose atomic.Bool

	mu       sync.Mutex
	archived int64     // rows left to purge
	oldest   time.Time // OldestArchived; zero: empty
	calls    []janitorCall
	// during, when set, runs inside every purge call (call number n, from
	// 1), before it returns: it may sleep, block, or return an error.
	during func(n int) error
}

type janitorCall struct {
	name       string
	began, end time.Time
}

func (s *janitorStore) record(name string) func() {
	s.mu.Lock()
	i := len(s.calls)
	s.calls = append(s.calls, janitorCall{name: name, began: time.Now()})
	s.mu.Unlock()
	return func() {
		s.mu.Lock()
		s.calls[i].end = time.Now()
		s.mu.Unlock()
	}
}

func (s *janitorStore) callsOf(name string) []janitorCall {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []janitorCall
	for _, c := range s.calls {
		if name == "" || c.name == name {
			out = append(out, c)
		}
	}
	return out
}

func (s *janitorStore) MaintainArchive(ctx context.Context, _ time.Time) error {
	defer s.record("maintain")()
	return ctx.Err()
}

func (s *janitorStore) PurgeArchiveBatch(ctx context.Context, _ time.Time, limit int) (int64, bool, error) {
	done := s.record("purge")
	defer done()
	n := len(s.callsOf("purge"))
	if s.during != nil {
		if err := s.during(n); err != nil {
			return 0, false, err
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	removed := min(int64(limit), s.archived)
	s.archived -= removed
	return removed, s.archived > 0, ctx.Err()
}

func (s *janitorStore) PurgeParked(ctx context.Context, before time.Time, limit int) ([]string, bool, error) {
	defer s.record("parked")()
	return s.Backend.PurgeParked(ctx, before, limit)
}

func (s *janitorStore) OldestArchived(context.Context) (time.Time, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.oldest, !s.oldest.IsZero(), nil
}

func (s *janitorStore) RenewLease(ctx context.Context, l outbox.Lease, ttl time.Duration) (outbox.Lease, error) {
	if l.Partition == 0 && s.lose.Load() {
		return outbox.Lease{}, outbox.ErrLeaseLost
	}
	return s.Backend.RenewLease(ctx, l, ttl)
}

func (s *janitorStore) AcquireLease(ctx context.Context, p int, owner string, ttl time.Duration) (outbox.Lease, error) {
	if p == 0 && s.lose.Load() {
		return outbox.Lease{}, outbox.ErrLeaseHeld
	}
	return s.Backend.AcquireLease(ctx, p, owner, ttl)
}

var _ outbox.ArchiveJanitor = (*janitorStore)(nil)

// retentionOptions are the options of the retention tests: fake time
// makes the intervals free.
func retentionOptions(logger *slog.Logger) outbox.RelayOptions {
	return outbox.RelayOptions{
		PollInterval:      time.Second,
		LeaseTTL:          30 * time.Second,
		ArchiveRetention:  24 * time.Hour,
		RetentionInterval: time.Minute,
		RetentionPause:    100 * time.Millisecond,
		RetentionBatch:    10,
		StatsInterval:     -1,
		HealthInterval:    -1,
		Logger:            logger,
	}
}

// Only the relay that holds partition 0 runs retention rounds; a relay
// that does not serve partition 0 says so once at start.
func TestRetentionRunsOnlyOnHolderOfPartition0(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New(memory.Options{Partitions: 2})
		holder := &janitorStore{Backend: b, archived: 25}
		other := &janitorStore{Backend: b, archived: 25}
		logs0, logs1 := &logCapture{}, &logCapture{}
		o0 := retentionOptions(slog.New(logs0))
		o0.Partitions = []int{0}
		o0.ParkedRetention = 7 * 24 * time.Hour
		o1 := retentionOptions(slog.New(logs1))
		o1.Partitions = []int{1}
		o1.ParkedRetention = 7 * 24 * time.Hour
		r0 := startRelay(t, holder, &recorder{}, o0)
		r1 := startRelay(t, other, &recorder{}, o1)
		time.Sleep(5 * time.Minute)
		synctest.Wait()
		if got := other.callsOf(""); len(got) != 0 {
			t.Errorf("the relay serving partition 1 only made %d janitor calls; want none", len(got))
		}
		if st := r1.Stats(); st.RetentionRounds != 0 || st.ArchivedRemoved != 0 {
			t.Errorf("the relay serving partition 1 only: %+v; want no rounds and nothing removed", st)
		}
		st := r0.Stats()
		if st.RetentionRounds < 3 || st.ArchivedRemoved != 25 {
			t.Errorf("the holder of partition 0 after 5 rounds' time: %d rounds, %d removed; want at least 3 rounds (one a minute, give or take a tenth) and the 25 archived removed", st.RetentionRounds, st.ArchivedRemoved)
		}
		if n := len(holder.callsOf("maintain")); int64(n) != st.RetentionRounds {
			t.Errorf("MaintainArchive called %d times in %d rounds; want once a round", n, st.RetentionRounds)
		}
		if n, _ := logs1.count(slog.LevelInfo, "does not serve partition 0"); n != 1 {
			t.Errorf("the relay without partition 0 logged %d INFOs that it never runs retention; want 1", n)
		}
		if n, _ := logs0.count(slog.LevelInfo, "does not serve partition 0"); n != 0 {
			t.Errorf("the holder of partition 0 logged that it does not serve it")
		}
		for i, logs := range []*logCapture{logs0, logs1} {
			if n, _ := logs.count(slog.LevelWarn, "parked entries older than 168h0m0s will be removed for good"); n != 1 {
				t.Errorf("relay %d logged %d WARNs at start that parked entries will be removed; want 1 on every relay", i, n)
			}
		}
		// Each round: MaintainArchive, the archive's purges (at least one),
		// then the parked purge.
		var rounds [][]string
		for _, c := range holder.callsOf("") {
			if c.name == "maintain" {
				rounds = append(rounds, nil)
			}
			if len(rounds) > 0 {
				rounds[len(rounds)-1] = append(rounds[len(rounds)-1], c.name)
			}
		}
		if len(rounds) < 3 {
			t.Fatalf("%d rounds in 5 minutes, want at least 3", len(rounds))
		}
		for _, round := range rounds[:len(rounds)-1] { // the last may be under way
			n := len(round)
			if n < 3 || round[0] != "maintain" || round[1] != "purge" || round[n-2] != "purge" || round[n-1] != "parked" {
				t.Errorf("a round made the calls %v; want maintain, then the archive's purges, then parked", round)
			}
		}
	})
}

// A round pauses between calls for RetentionPause, or for as long as the
// last call took when that is longer.
func TestRetentionPausesBetweenCalls(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const pause = 100 * time.Millisecond
		takes := map[int]time.Duration{1: 0, 2: 300 * time.Millisecond, 3: 10 * time.Millisecond, 4: time.Second}
		s := &janitorStore{Backend: memory.New(memory.Options{}), archived: 50, during: func(n int) error {
			time.Sleep(takes[n])
			return nil
		}}
		r := startRelay(t, s, &recorder{}, retentionOptions(quiet))
		waitFor(t, 10*time.Minute, "the 50 archived rows removed", func() bool { return r.Stats().ArchivedRemoved == 50 })
		calls := s.callsOf("")
		if len(calls) != 6 { // maintain, then 5 purges of 10
			t.Fatalf("%d calls in the first round, want 6 (MaintainArchive and 5 purges): %+v", len(calls), calls)
		}
		for i := 1; i < len(calls); i++ {
			last := calls[i-1].end.Sub(calls[i-1].began)
			want := max(pause, last)
			if gap := calls[i].began.Sub(calls[i-1].end); gap < want {
				t.Errorf("call %d (%s) began %v after call %d ended, which took %v; want a pause of at least %v", i+1, calls[i].name, gap, i, last, want)
			}
		}
	})
}

// A round stops before its next call once the relay no longer holds
// partition 0, even though the store reports more to remove, and no round
// runs while another relay holds it.
func TestRetentionStopsWhenPartition0IsLost(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		release := make(chan struct{})
		s := &janitorStore{Backend: memory.New(memory.Options{}), archived: 1 << 40}
		s.during = func(n int) error {
			if n == 2 {
				<-release
			}
			return nil
		}
		r := startRelay(t, s, &recorder{}, retentionOptions(quiet))
		waitFor(t, 5*time.Minute, "the second purge call", func() bool { return len(s.callsOf("purge")) == 2 })
		s.lose.Store(true)
		waitFor(t, time.Minute, "partition 0 lost", func() bool { return r.Stats().PartitionsHeld == 0 })
		close(release)
		time.Sleep(10 * time.Minute)
		synctest.Wait()
		if n := len(s.callsOf("purge")); n != 2 {
			t.Errorf("%d purge calls; want 2: the round must stop once partition 0 is lost, and no round may run without it", n)
		}
		if st := r.Stats(); st.RetentionRounds != 1 {
			t.Errorf("%d rounds, want 1", st.RetentionRounds)
		}
	})
}

// A failing janitor call ends the round, is logged as a store failure (one
// WARN, then summaries, then an INFO when it works again), and the next
// round retries.
func TestRetentionErrorsSummarised(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var failing atomic.Bool
		failing.Store(true)
		errDown := errors.New("dial tcp 127.0.0.1:5432: connect: connection refused")
		s := &janitorStore{Backend: memory.New(memory.Options{}), archived: 1 << 40}
		s.during = func(int) error {
			if failing.Load() {
				return errDown
			}
			return nil
		}
		logs := &logCapture{}
		o := retentionOptions(slog.New(logs))
		r := startRelay(t, s, &recorder{}, o)
		time.Sleep(10 * time.Minute)
		synctest.Wait()
		rounds := r.Stats().RetentionRounds
		// (The last round may be between its MaintainArchive and its purge.)
		if purges := int64(len(s.callsOf("purge"))); rounds < 5 || purges < rounds-1 || purges > rounds {
			t.Errorf("%d rounds and %d purge calls in 10 minutes of failures; want a round a minute, each ending at its failed purge", rounds, purges)
		}
		started := logs.recordsOf(slog.LevelWarn, "outbox relay: removing old archived entries failed; the retention round ends and the next one retries")
		if len(started) != 1 || started[0]["op"] != "purge_archive" || started[0]["err"] != errDown.Error() {
			t.Errorf("WARNs that retention started failing: %v; want one with op=purge_archive and the error", started)
		}
		failing.Store(false)
		time.Sleep(2 * time.Minute)
		synctest.Wait()
		if n := len(logs.recordsOf(slog.LevelInfo, "outbox relay: removing old archived entries works again")); n != 1 {
			t.Errorf("%d INFOs that retention works again, want 1", n)
		}
		if r.Stats().ArchivedRemoved == 0 {
			t.Error("nothing removed after the store came back")
		}
		if t.Failed() {
			t.Logf("logs:\n%s", logs.String())
		}
	})
}

// ParkedRetention removes parked entries older than it, logging at start
// that it will, and each removal at WARN with the IDs (at most 20 a line,
// the rest counted); it counts them in RelayStats and in
// MetricRetentionRemoved{kind=parked}.
func TestParkedRetentionRemovesLoudly(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New(memory.Options{})
		var entries []outbox.Entry
		for i := range 25 {
			entries = append(entries, outbox.Entry{ID: fmt.Sprintf("p%02d", i), Topic: "t", Key: fmt.Sprint("k", i)})
		}
		appendAll(t, b, entries...)
		logs := &logCapture{}
		reader := sdkmetric.NewManualReader()
		o := retentionOptions(slog.New(logs))
		o.ArchiveRetention = 0
		o.ParkedRetention = time.Hour
		o.RetentionBatch = 100
		o.MeterProvider = sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
		r := startRelay(t, b, &recorder{fail: func(outbox.Entry, int) error { return errPoison }}, o)
		if n, _ := logs.count(slog.LevelWarn, "parked entries older than 1h0m0s will be removed for good"); n != 1 {
			t.Errorf("%d WARNs at start that parked entries will be removed; want 1", n)
		}
		if got := counterSum(collect(t, reader)[outbox.MetricRetentionRemoved], "kind", "parked"); got != 0 {
			t.Errorf("%s{kind=parked} = %d before any removal", outbox.MetricRetentionRemoved, got)
		}
		waitFor(t, time.Minute, "every entry parked", func() bool { return r.Stats().Parked == 25 })
		time.Sleep(30 * time.Minute)
		synctest.Wait()
		if st := r.Stats(); st.ParkedRemoved != 0 {
			t.Fatalf("%d parked entries removed half an hour after they were parked; ParkedRetention is an hour", st.ParkedRemoved)
		}
		waitFor(t, 2*time.Hour, "the parked entries removed", func() bool { return r.Stats().ParkedRemoved == 25 })
		lines := logs.recordsOf(slog.LevelWarn, "outbox relay: removed parked entries for good (RelayOptions.ParkedRetention); they were never delivered")
		if len(lines) != 1 {
			t.Fatalf("%d WARNs of removed parked entries, want 1 (one call removed all 25): %v", len(lines), lines)
		}
		a := lines[0]
		ids := strings.Split(a["ids"], ",")
		if a["removed"] != "25" || len(ids) != 20 || a["and_more"] != "5" {
			t.Errorf("the removal WARN has removed=%s, %d IDs and and_more=%s; want 25, 20 and 5", a["removed"], len(ids), a["and_more"])
		}
		for _, id := range ids {
			if !strings.HasPrefix(id, "p") {
				t.Errorf("the removal WARN lists %q, not an entry's ID", id)
			}
		}
		if got := counterSum(collect(t, reader)[outbox.MetricRetentionRemoved], "kind", "parked"); got != 25 {
			t.Errorf("%s{kind=parked} = %d, want 25", outbox.MetricRetentionRemoved, got)
		}
		if st, err := b.Stats(context.Background()); err != nil || st.Parked != 0 {
			t.Errorf("the store still has %d parked entries (%v)", st.Parked, err)
		}
	})
}

// MetricArchiveOldestAge reports the age of the oldest archived entry, and
// nothing while the archive is empty; MetricRetentionRemoved{kind=archived}
// starts at zero and counts the archive's removals.
func TestRetentionMetrics(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := &janitorStore{Backend: memory.New(memory.Options{})}
		reader := sdkmetric.NewManualReader()
		o := retentionOptions(quiet)
		o.StatsInterval = time.Second
		o.MeterProvider = sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
		r := startRelay(t, s, &recorder{}, o)
		ms := collect(t, reader)
		if _, ok := ms[outbox.MetricArchiveOldestAge]; ok {
			if d, _ := ms[outbox.MetricArchiveOldestAge].Data.(metricdata.Gauge[float64]); len(d.DataPoints) != 0 {
				t.Errorf("%s reported %v for an empty archive", outbox.MetricArchiveOldestAge, d.DataPoints)
			}
		}
		removed, ok := ms[outbox.MetricRetentionRemoved]
		if !ok || counterSum(removed, "kind", "archived") != 0 {
			t.Errorf("%s{kind=archived} is not exported at zero at start", outbox.MetricRetentionRemoved)
		}
		s.mu.Lock()
		s.oldest = time.Now().Add(-90 * time.Second)
		s.archived = 7
		s.mu.Unlock()
		time.Sleep(2 * time.Second) // the sample is at most StatsInterval old
		if got := gaugeValue(t, collect(t, reader)[outbox.MetricArchiveOldestAge]); got != 92 {
			t.Errorf("%s = %v, want 92 (the oldest entry was archived 92 s ago)", outbox.MetricArchiveOldestAge, got)
		}
		waitFor(t, 5*time.Minute, "the archive purged", func() bool { return r.Stats().ArchivedRemoved == 7 })
		if got := counterSum(collect(t, reader)[outbox.MetricRetentionRemoved], "kind", "archived"); got != 7 {
			t.Errorf("%s{kind=archived} = %d, want 7", outbox.MetricRetentionRemoved, got)
		}
	})
}

// notPurger hides the memory backend's ParkedPurger (and every other
// optional interface).
type notPurger struct{ outbox.Store }

func TestRetentionOptionsValidation(t *testing.T) {
	t.Parallel()
	mem := memory.New(memory.Options{})
	for _, tc := range []struct {
		name  string
		store outbox.Store
		opts  outbox.RelayOptions
		want  []string // the problem's options, first the one it is about
		text  string
	}{
		{"NegativeArchiveRetention", &janitorStore{Backend: mem}, outbox.RelayOptions{ArchiveRetention: -time.Hour}, []string{"ArchiveRetention"}, "must not be negative"},
		{"NegativeParkedRetention", mem, outbox.RelayOptions{ParkedRetention: -time.Hour}, []string{"ParkedRetention"}, "must not be negative"},
		{"NegativeRetentionInterval", mem, outbox.RelayOptions{RetentionInterval: -time.Second}, []string{"RetentionInterval"}, "must not be negative"},
		{"NegativeRetentionPause", mem, outbox.RelayOptions{RetentionPause: -time.Second}, []string{"RetentionPause"}, "must not be negative"},
		{"NegativeRetentionBatch", mem, outbox.RelayOptions{RetentionBatch: -1}, []string{"RetentionBatch"}, "positive size"},
		{"ArchiveRetentionWithoutArchive", mem, outbox.RelayOptions{ArchiveRetention: time.Hour}, []string{"ArchiveRetention"}, "the store keeps no archive"},
		{"ParkedRetentionWithoutPurger", notPurger{mem}, outbox.RelayOptions{ParkedRetention: time.Hour}, []string{"ParkedRetention"}, "cannot remove parked entries"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := outbox.NewRelay(tc.store, &recorder{}, tc.opts)
			var oe *outbox.OptionsError
			if !errors.As(err, &oe) || len(oe.Problems) != 1 {
				t.Fatalf("NewRelay: %v; want an OptionsError with one problem", err)
			}
			if p := oe.Problems[0]; p.Options[0] != tc.want[0] || !strings.Contains(err.Error(), tc.text) {
				t.Errorf("the problem names %v and reads %q; want it about %s, saying %q", p.Options, err, tc.want[0], tc.text)
			}
			if tc.name == "ArchiveRetentionWithoutArchive" && !strings.Contains(err.Error(), "Options.Archive") {
				t.Errorf("%q does not name the fix (the backend's Archive option)", err)
			}
		})
	}
	for _, tc := range []struct {
		name  string
		store outbox.Store
		opts  outbox.RelayOptions
	}{
		{"ParkedRetentionWithPurger", mem, outbox.RelayOptions{ParkedRetention: time.Hour}},
		{"ArchiveRetentionWithJanitor", &janitorStore{Backend: mem}, outbox.RelayOptions{ArchiveRetention: time.Hour}},
		{"NegativeHealthIntervalTurnsChecksOff", mem, outbox.RelayOptions{HealthInterval: -1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := outbox.NewRelay(tc.store, &recorder{}, tc.opts); err != nil {
				t.Fatalf("NewRelay: %v", err)
			}
		})
	}
}

// In a balancing fleet (Membership) the partitions are shared, and only
// the relay that got partition 0 runs retention rounds: one janitor per
// fleet.
func TestRetentionOneJanitorPerBalancedFleet(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New(memory.Options{Partitions: 4})
		stores := []*janitorStore{{Backend: b}, {Backend: b}, {Backend: b}}
		relays := make([]*outbox.Relay, len(stores))
		for i, s := range stores {
			relays[i] = startRelay(t, s, &recorder{}, retentionOptions(quiet))
		}
		waitFor(t, 5*time.Minute, "the fleet balanced", func() bool {
			held := int64(0)
			for _, r := range relays {
				if r.Stats().Members != 3 {
					return false
				}
				held += r.Stats().PartitionsHeld
			}
			return held == 4
		})
		time.Sleep(time.Minute) // let a hand-over in flight settle
		before := make([]int, len(stores))
		for i, s := range stores {
			before[i] = len(s.callsOf("maintain"))
		}
		time.Sleep(10 * time.Minute)
		synctest.Wait()
		janitors := 0
		for i, s := range stores {
			if n := len(s.callsOf("maintain")) - before[i]; n > 0 {
				janitors++
				if n < 8 {
					t.Errorf("relay %d ran %d rounds in 10 minutes with RetentionInterval 1m; want about 10", i, n)
				}
			}
		}
		if janitors != 1 {
			t.Errorf("%d relays ran retention rounds in the 10 minutes after the fleet balanced; want exactly 1 (the holder of partition 0)", janitors)
		}
	})
}
