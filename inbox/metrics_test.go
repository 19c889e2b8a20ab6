package inbox_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/outboxrelay/outbox/inbox"
)

// collect reads every metric of the inbox's meter by name.
func collect(t *testing.T, reader *sdkmetric.ManualReader) map[string]metricdata.Metrics {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatalf("Collect: %v", err)
	}
	out := map[string]metricdata.Metrics{}
	for _, sm := range rm.ScopeMetrics {
		if sm.Scope.Name != "github.com/outboxrelay/outbox/inbox" {
			t.Errorf("meter %q, want github.com/outboxrelay/outbox/inbox", sm.Scope.Name)
		}
		for _, m := range sm.Metrics {
			out[m.Name] = m
		}
	}
	return out
}

// sum is the counter's value at the data point whose attribute attr is
// value ("" for a counter without attributes); -1 if there is none.
func sum(t *testing.T, ms map[string]metricdata.Metrics, name, attr, value string) int64 {
	t.Helper()
	d, ok := ms[name].Data.(metricdata.Sum[int64])
	if !ok {
		t.Fatalf("%s is %T, want an int64 counter (exported: %v)", name, ms[name].Data, keys(ms))
	}
	for _, dp := range d.DataPoints {
		v, ok := dp.Attributes.Value(attribute.Key(attr))
		if (attr == "" && dp.Attributes.Len() == 0) || (ok && v.AsString() == value) {
			return dp.Value
		}
	}
	return -1
}

// histCount is the number of durations recorded with result.
func histCount(t *testing.T, ms map[string]metricdata.Metrics, result string) uint64 {
	t.Helper()
	d, ok := ms[inbox.MetricTxDuration].Data.(metricdata.Histogram[float64])
	if !ok {
		t.Fatalf("%s is %T, want a float64 histogram", inbox.MetricTxDuration, ms[inbox.MetricTxDuration].Data)
	}
	for _, dp := range d.DataPoints {
		if v, ok := dp.Attributes.Value("result"); ok && v.AsString() == result {
			return dp.Count
		}
	}
	return 0
}

func keys(ms map[string]metricdata.Metrics) []string {
	var out []string
	for k := range ms {
		out = append(out, k)
	}
	return out
}

func TestMetricsExportedAtZero(t *testing.T) {
	t.Parallel()
	reader := sdkmetric.NewManualReader()
	newInbox(t, inbox.NewMemory(), inbox.Options{MeterProvider: sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))})
	ms := collect(t, reader)
	for _, outcome := range []string{"applied", "duplicate", "late"} {
		if got := sum(t, ms, inbox.MetricMessages, "outcome", outcome); got != 0 {
			t.Errorf("%s{outcome=%s} = %d before any message, want 0 (exported from New on)", inbox.MetricMessages, outcome, got)
		}
	}
	for _, name := range []string{inbox.MetricGaps, inbox.MetricGapMissing} {
		if got := sum(t, ms, name, "", ""); got != 0 {
			t.Errorf("%s = %d before any message, want 0", name, got)
		}
	}
}

// TestMetricsCountCommittedResults: messages by outcome, gaps and their
// missing numbers, transaction attempts by result; a failed batch counts
// no message.
func TestMetricsCountCommittedResults(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		reader := sdkmetric.NewManualReader()
		s := &conflicting{Memory: inbox.NewMemory(), fails: 2}
		ib := newInbox(t, s, inbox.Options{MeterProvider: sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))})
		var rec recorder
		// Two conflicts, then: a1, a4 (gap 2..3), a2 (late), dup of a1.
		if _, err := ib.HandleBatch(t.Context(), []inbox.Message{
			{ID: "a1", Key: "a", Seq: 1}, {ID: "a4", Key: "a", Seq: 4}, {ID: "a2", Key: "a", Seq: 2}, {ID: "a1", Key: "a", Seq: 1},
		}, rec.handle); err != nil {
			t.Fatal(err)
		}
		// b9 after b1: gap 2..8.
		handle(t, ib, rec.handle, inbox.Message{ID: "b1", Key: "b", Seq: 1})
		handle(t, ib, rec.handle, inbox.Message{ID: "b9", Key: "b", Seq: 9}, inbox.Message{ID: "a4"})
		// A failing handler: one failed attempt, no message counted.
		errBad := errors.New("bad")
		if _, err := ib.Handle(t.Context(), inbox.Message{ID: "x"}, func(context.Context, *inbox.MemoryTx, inbox.Message) error { return errBad }); !errors.Is(err, errBad) {
			t.Fatal(err)
		}
		ms := collect(t, reader)
		for outcome, want := range map[string]int64{"applied": 4, "duplicate": 2, "late": 1} {
			if got := sum(t, ms, inbox.MetricMessages, "outcome", outcome); got != want {
				t.Errorf("%s{outcome=%s} = %d, want %d", inbox.MetricMessages, outcome, got, want)
			}
		}
		if got := sum(t, ms, inbox.MetricGaps, "", ""); got != 2 {
			t.Errorf("%s = %d, want 2", inbox.MetricGaps, got)
		}
		if got := sum(t, ms, inbox.MetricGapMissing, "", ""); got != 2+7 {
			t.Errorf("%s = %d, want 9 (2..3 and 2..8)", inbox.MetricGapMissing, got)
		}
		for result, want := range map[string]uint64{"ok": 3, "retry": 2, "failed": 1} {
			if got := histCount(t, ms, result); got != want {
				t.Errorf("%s{result=%s} count = %d, want %d", inbox.MetricTxDuration, result, got, want)
			}
		}
		if u := ms[inbox.MetricTxDuration].Unit; u != "s" {
			t.Errorf("%s unit %q, want s", inbox.MetricTxDuration, u)
		}
	})
}

// TestMetricsApplyCountsWhenItReturns: Apply counts its results when it
// returns (the caller commits), and the held gaps of GapHold count
// retries.
func TestMetricsApplyAndHold(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		reader := sdkmetric.NewManualReader()
		s := inbox.NewMemory()
		ib := newInbox(t, s, inbox.Options{MeterProvider: sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)),
			Gaps: inbox.GapHold, GapHold: 3 * time.Second, GapRetry: time.Second})
		var rec recorder
		err := s.InTx(t.Context(), func(ctx context.Context, tx *inbox.MemoryTx) error {
			_, err := ib.Apply(ctx, tx, []inbox.Message{{ID: "a"}, {ID: "a"}}, rec.handle)
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		handle(t, ib, rec.handle, inbox.Message{ID: "k1", Key: "k", Seq: 1})
		handle(t, ib, rec.handle, inbox.Message{ID: "k3", Key: "k", Seq: 3}) // held 3s: tries at 0, 1, 2, 3s, then forced
		ms := collect(t, reader)
		if got := sum(t, ms, inbox.MetricMessages, "outcome", "applied"); got != 3 {
			t.Errorf("applied = %d, want 3", got)
		}
		if got := sum(t, ms, inbox.MetricMessages, "outcome", "duplicate"); got != 1 {
			t.Errorf("duplicate = %d, want 1", got)
		}
		if got := sum(t, ms, inbox.MetricGaps, "", ""); got != 1 {
			t.Errorf("gaps = %d, want 1 (a held gap counts once, when applied)", got)
		}
		if ok, retry := histCount(t, ms, "ok"), histCount(t, ms, "retry"); ok != 2 || retry != 4 {
			t.Errorf("transaction attempts: ok %d, retry %d; want 2 and 4 (Apply is the caller's transaction)", ok, retry)
		}
	})
}

func TestMetricsPurged(t *testing.T) {
	t.Parallel()
	reader := sdkmetric.NewManualReader()
	s := inbox.NewMemory()
	fill(t, s, 5, 3, 2*time.Hour)
	_, _, err := inbox.PurgeOnce(t.Context(), s, inbox.JanitorOptions{Retention: time.Hour, Logger: quiet,
		MeterProvider: sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))})
	if err != nil {
		t.Fatal(err)
	}
	ms := collect(t, reader)
	if ids, keys := sum(t, ms, inbox.MetricPurged, "kind", "id"), sum(t, ms, inbox.MetricPurged, "kind", "key"); ids != 5 || keys != 3 {
		t.Errorf("%s: id %d, key %d; want 5 and 3", inbox.MetricPurged, ids, keys)
	}
}
