package outbox_test

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/outboxrelay/outbox"
	"github.com/outboxrelay/outbox/backends/memory"
)

// healthStore is a test double of the SPI's HealthChecker over a memory
// backend: Health returns what the test set, or its error, and counts
// the calls.
type healthStore struct {
	*memory.Backend
	mu     sync.Mutex
	health outbox.Health
	err    error
	calls  int
}

func (s *healthStore) Health(ctx context.Context) (outbox.Health, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls++
	return s.health, s.err
}

func (s *healthStore) set(h outbox.Health, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.health, s.err = h, err
}

func (s *healthStore) called() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls
}

var _ outbox.HealthChecker = (*healthStore)(nil)

var (
	warnAutovacuum = outbox.HealthWarning{Code: "autovacuum-off", Message: "autovacuum is off for the server: the outbox table's 586000 dead rows are never reclaimed; run ALTER SYSTEM SET autovacuum = on and reload"}
	warnXmin       = outbox.HealthWarning{Code: "xmin-horizon-held", Object: "public.outbox", Message: "a transaction open for 12m holds back every vacuum; end it"}
)

// Each warning is logged once at WARN when it appears (the store's
// message, with code and object) and once at INFO when it is gone; a
// failed reading changes nothing; Health is called at start and then every
// HealthInterval.
func TestHealthWarningsLoggedOnceAndCleared(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := &healthStore{Backend: memory.New(memory.Options{})}
		s.set(outbox.Health{Warnings: []outbox.HealthWarning{warnAutovacuum}}, nil)
		logs := &logCapture{}
		startRelay(t, s, &recorder{}, outbox.RelayOptions{HealthInterval: time.Minute, StatsInterval: -1, Logger: slog.New(logs)})
		synctest.Wait()
		if n := s.called(); n != 1 {
			t.Fatalf("Health called %d times at start, want 1", n)
		}
		time.Sleep(5*time.Minute + time.Second)
		synctest.Wait()
		if n := s.called(); n != 6 {
			t.Errorf("Health called %d times in 5 minutes with HealthInterval 1m, want 6 (one at start)", n)
		}
		s.set(outbox.Health{Warnings: []outbox.HealthWarning{warnAutovacuum, warnXmin}}, nil)
		time.Sleep(time.Minute)
		s.set(outbox.Health{}, errors.New("connection refused"))
		time.Sleep(2 * time.Minute)
		s.set(outbox.Health{Warnings: []outbox.HealthWarning{warnXmin}}, nil)
		time.Sleep(time.Minute)
		synctest.Wait()

		warned := logs.recordsOf(slog.LevelWarn, "outbox relay: store health: "+warnAutovacuum.Message)
		if len(warned) != 1 || warned[0]["code"] != warnAutovacuum.Code || warned[0]["object"] != "" {
			t.Errorf("WARNs of %s: %v; want one, with its code and an empty object", warnAutovacuum.Code, warned)
		}
		if w := logs.recordsOf(slog.LevelWarn, "outbox relay: store health: "+warnXmin.Message); len(w) != 1 || w[0]["object"] != warnXmin.Object {
			t.Errorf("WARNs of %s: %v; want one, with its object", warnXmin.Code, w)
		}
		cleared := logs.recordsOf(slog.LevelInfo, "outbox relay: store health: the condition is gone")
		if len(cleared) != 1 || cleared[0]["code"] != warnAutovacuum.Code {
			t.Errorf("INFOs of cleared warnings: %v; want one, for %s only (the failed readings clear nothing)", cleared, warnAutovacuum.Code)
		}
		if n := len(logs.recordsOf(slog.LevelWarn, "outbox relay: reading the store's health failed; the store health gauges go stale and its warnings stay as last read")); n != 1 {
			t.Errorf("%d WARNs that reading the health failed, want 1", n)
		}
		// The warning comes back: it is logged again.
		s.set(outbox.Health{Warnings: []outbox.HealthWarning{warnXmin, warnAutovacuum}}, nil)
		time.Sleep(time.Minute)
		synctest.Wait()
		if n := len(logs.recordsOf(slog.LevelWarn, "outbox relay: store health: "+warnAutovacuum.Message)); n != 2 {
			t.Errorf("%d WARNs of %s after it came back, want 2", n, warnAutovacuum.Code)
		}
		if t.Failed() {
			t.Logf("logs:\n%s", logs.String())
		}
	})
}

// A negative HealthInterval turns the checks off.
func TestHealthIntervalNegativeTurnsChecksOff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := &healthStore{Backend: memory.New(memory.Options{})}
		reader := sdkmetric.NewManualReader()
		startRelay(t, s, &recorder{}, outbox.RelayOptions{HealthInterval: -1, MeterProvider: sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))})
		time.Sleep(10 * time.Minute)
		synctest.Wait()
		if n := s.called(); n != 0 {
			t.Errorf("Health called %d times with HealthInterval -1, want 0", n)
		}
		if _, ok := collect(t, reader)[outbox.MetricStoreWarning]; ok {
			t.Errorf("%s exported with the checks off", outbox.MetricStoreWarning)
		}
	})
}

// The store gauges report the last reading: each table's size, dead rows
// and vacuums (a figure of -1 left out), the server's memory, and 1 per
// warning (0 without attributes while none holds).
func TestHealthMetrics(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := &healthStore{Backend: memory.New(memory.Options{})}
		s.set(outbox.Health{}, nil)
		reader := sdkmetric.NewManualReader()
		startRelay(t, s, &recorder{}, outbox.RelayOptions{HealthInterval: time.Minute, StatsInterval: -1,
			MeterProvider: sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))})
		synctest.Wait()
		ms := collect(t, reader)
		if got := gaugeValue(t, ms[outbox.MetricStoreWarning]); got != 0 {
			t.Errorf("%s = %v without warnings, want 0", outbox.MetricStoreWarning, got)
		}
		for _, name := range []string{outbox.MetricTableSize, outbox.MetricMemoryUsed, outbox.MetricMemoryFragmentation} {
			if n := points(ms[name]); n != 0 {
				t.Errorf("%s has %d points from a reading without tables or memory", name, n)
			}
		}
		s.set(outbox.Health{
			Tables: []outbox.TableHealth{
				{Name: "public.outbox", Bytes: 11 << 20, LiveRows: 900, DeadRows: 586000, Vacuums: 0},
				{Name: "public.outbox_archive", Bytes: 8 << 20, LiveRows: -1, DeadRows: -1, Vacuums: -1},
			},
			Memory:   &outbox.MemoryHealth{UsedBytes: 64 << 20, RSSBytes: 96 << 20, Fragmentation: 1.5},
			Warnings: []outbox.HealthWarning{warnAutovacuum, warnXmin},
		}, nil)
		time.Sleep(time.Minute)
		synctest.Wait()
		ms = collect(t, reader)
		byTable := func(name string) map[string]int64 {
			out := map[string]int64{}
			d, _ := ms[name].Data.(metricdata.Gauge[int64])
			for _, dp := range d.DataPoints {
				v, _ := dp.Attributes.Value(attribute.Key("table"))
				out[v.AsString()] = dp.Value
			}
			return out
		}
		if got := byTable(outbox.MetricTableSize); len(got) != 2 || got["public.outbox"] != 11<<20 || got["public.outbox_archive"] != 8<<20 {
			t.Errorf("%s = %v", outbox.MetricTableSize, got)
		}
		if got := byTable(outbox.MetricTableDeadRows); len(got) != 1 || got["public.outbox"] != 586000 {
			t.Errorf("%s = %v; want the outbox table's 586000 only (the archive's is unknown)", outbox.MetricTableDeadRows, got)
		}
		if got := byTable(outbox.MetricTableVacuums); len(got) != 1 || got["public.outbox"] != 0 {
			t.Errorf("%s = %v; want the outbox table's 0 only", outbox.MetricTableVacuums, got)
		}
		if got := gaugeValue(t, ms[outbox.MetricMemoryUsed]); got != 64<<20 {
			t.Errorf("%s = %v", outbox.MetricMemoryUsed, got)
		}
		if got := gaugeValue(t, ms[outbox.MetricMemoryFragmentation]); got != 1.5 {
			t.Errorf("%s = %v", outbox.MetricMemoryFragmentation, got)
		}
		d, _ := ms[outbox.MetricStoreWarning].Data.(metricdata.Gauge[int64])
		warned := map[string]int64{}
		for _, dp := range d.DataPoints {
			code, _ := dp.Attributes.Value(attribute.Key("code"))
			object, _ := dp.Attributes.Value(attribute.Key("object"))
			warned[code.AsString()+"/"+object.AsString()] = dp.Value
		}
		if len(warned) != 2 || warned["autovacuum-off/"] != 1 || warned["xmin-horizon-held/public.outbox"] != 1 {
			t.Errorf("%s = %v; want 1 for each warning", outbox.MetricStoreWarning, warned)
		}
		// A reading older than three intervals is not reported.
		s.set(outbox.Health{}, errors.New("connection refused"))
		time.Sleep(4 * time.Minute)
		synctest.Wait()
		if n := points(collect(t, reader)[outbox.MetricTableSize]); n != 0 {
			t.Errorf("%s still has %d points from a reading 4 intervals old", outbox.MetricTableSize, n)
		}
	})
}

// points counts the data points of a gauge.
func points(m metricdata.Metrics) int {
	switch d := m.Data.(type) {
	case metricdata.Gauge[int64]:
		return len(d.DataPoints)
	case metricdata.Gauge[float64]:
		return len(d.DataPoints)
	}
	return 0
}

// Every relay reads the store's health, not only the holder of
// partition 0.
func TestHealthReadByEveryRelay(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New(memory.Options{Partitions: 2})
		stores := []*healthStore{{Backend: b}, {Backend: b}}
		for i, s := range stores {
			startRelay(t, s, &recorder{}, outbox.RelayOptions{Partitions: []int{i}, HealthInterval: time.Minute, StatsInterval: -1})
		}
		time.Sleep(3*time.Minute + time.Second)
		synctest.Wait()
		for i, s := range stores {
			if n := s.called(); n != 4 {
				t.Errorf("the relay of partition %d read the health %d times in 3 minutes, want 4", i, n)
			}
		}
	})
}
