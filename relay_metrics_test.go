package outbox_test

import (
	"bytes"
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

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/outboxrelay/outbox"
	"github.com/outboxrelay/outbox/backends/memory"
	"github.com/outboxrelay/outbox/backoff"
)

// collect reads every metric of reader by name.
func collect(t *testing.T, reader *sdkmetric.ManualReader) map[string]metricdata.Metrics {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	out := map[string]metricdata.Metrics{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			out[m.Name] = m
		}
	}
	return out
}

func gaugeValue(t *testing.T, m metricdata.Metrics) float64 {
	t.Helper()
	switch d := m.Data.(type) {
	case metricdata.Gauge[int64]:
		if len(d.DataPoints) != 1 {
			t.Fatalf("%s: %d data points, want 1", m.Name, len(d.DataPoints))
		}
		return float64(d.DataPoints[0].Value)
	case metricdata.Gauge[float64]:
		if len(d.DataPoints) != 1 {
			t.Fatalf("%s: %d data points, want 1", m.Name, len(d.DataPoints))
		}
		return d.DataPoints[0].Value
	}
	t.Fatalf("%s is a %T, not a gauge", m.Name, m.Data)
	return 0
}

func counterSum(m metricdata.Metrics, attr, value string) int64 {
	d, _ := m.Data.(metricdata.Sum[int64])
	var n int64
	for _, dp := range d.DataPoints {
		if v, ok := dp.Attributes.Value(attribute.Key(attr)); attr == "" || ok && v.AsString() == value {
			n += dp.Value
		}
	}
	return n
}

// lockedBuffer is a log destination safe for concurrent writes.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func TestRelayMetrics(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		reader := sdkmetric.NewManualReader()
		mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
		b := memory.New(memory.Options{Partitions: 2})
		for i := range 6 {
			appendAll(t, b, outbox.Entry{ID: fmt.Sprint("e", i), Topic: "t", Key: fmt.Sprint("k", i)})
		}
		appendAll(t, b, outbox.Entry{ID: "poison", Topic: "t", Key: "p"})
		var logs lockedBuffer
		sink := &recorder{fail: func(e outbox.Entry, attempt int) error {
			if e.ID == "poison" {
				return backoff.Permanent(errors.New("refused for good"))
			}
			return nil
		}}
		r := startRelay(t, b, sink, outbox.RelayOptions{
			MeterProvider: mp, StatsInterval: time.Second,
			Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn})),
		})
		waitFor(t, time.Minute, "six entries published", func() bool { return r.Stats().Published == 6 })
		time.Sleep(2 * time.Second) // a stats sample after the drain
		ms := collect(t, reader)

		for _, name := range []string{outbox.MetricPublishDuration, outbox.MetricCommitToPublish} {
			h, ok := ms[name].Data.(metricdata.Histogram[float64])
			if !ok || len(h.DataPoints) == 0 {
				t.Fatalf("%s: no histogram data (%T)", name, ms[name].Data)
			}
			for _, dp := range h.DataPoints {
				if _, ok := dp.Attributes.Value("partition"); ok {
					t.Errorf("%s carries a partition attribute; histograms must not", name)
				}
				if dp.Bounds[0] > 0.001 || dp.Bounds[len(dp.Bounds)-1] < 60 {
					t.Errorf("%s buckets %v do not span sub-millisecond to a minute", name, dp.Bounds)
				}
			}
		}
		if got := counterSum(ms[outbox.MetricEntries], "outcome", "sent"); got != 6 {
			t.Errorf("%s{outcome=sent} = %d, want 6", outbox.MetricEntries, got)
		}
		if got := counterSum(ms[outbox.MetricEntries], "outcome", "parked"); got != 1 {
			t.Errorf("%s{outcome=parked} = %d, want 1", outbox.MetricEntries, got)
		}
		if got := counterSum(ms[outbox.MetricLeaseAcquired], "", ""); got != 2 {
			t.Errorf("%s = %d, want 2 (both partitions)", outbox.MetricLeaseAcquired, got)
		}
		if got := gaugeValue(t, ms[outbox.MetricPartitionsHeld]); got != 2 {
			t.Errorf("%s = %v, want 2", outbox.MetricPartitionsHeld, got)
		}
		if got := gaugeValue(t, ms[outbox.MetricMembers]); got != 1 {
			t.Errorf("%s = %v, want 1", outbox.MetricMembers, got)
		}
		for name, want := range map[string]float64{outbox.MetricPending: 0, outbox.MetricDue: 0, outbox.MetricParked: 1, outbox.MetricLag: 0} {
			if got := gaugeValue(t, ms[name]); got != want {
				t.Errorf("%s = %v, want %v", name, got, want)
			}
		}
		if !strings.Contains(logs.String(), "publishing failed") {
			t.Errorf("a failed publish was not logged at WARN; logs:\n%s", logs.String())
		}
	})
}

// TestRelayBreakerTransitionsAreLoggedAndCounted: the sink fails every
// message until it is told to recover.
func TestRelayBreakerTransitionsAreLoggedAndCounted(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		reader := sdkmetric.NewManualReader()
		mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
		b := memory.New(memory.Options{})
		appendAll(t, b, outbox.Entry{ID: "e", Topic: "t", Key: "k"})
		var down sync.Mutex
		broken := true
		sink := &recorder{fail: func(e outbox.Entry, attempt int) error {
			down.Lock()
			defer down.Unlock()
			if broken {
				return errors.New("broker unreachable")
			}
			return nil
		}}
		var logs lockedBuffer
		r := startRelay(t, b, sink, outbox.RelayOptions{
			MeterProvider: mp, BreakerThreshold: 2, BreakerCooldown: time.Second,
			Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn})),
		})
		waitFor(t, time.Minute, "the breaker open", func() bool {
			m := collect(t, reader)[outbox.MetricBreakerState]
			return m.Data != nil && gaugeValue(t, m) == 1
		})
		if d := collect(t, reader)[outbox.MetricBreakerState].Data.(metricdata.Gauge[int64]); !d.DataPoints[0].Attributes.Equals(ptr(attribute.NewSet(attribute.String("topic", "t")))) {
			t.Errorf("%s attributes = %v, want topic=t", outbox.MetricBreakerState, d.DataPoints[0].Attributes)
		}
		down.Lock()
		broken = false
		down.Unlock()
		waitFor(t, time.Hour, "the entry published", func() bool { return r.Stats().Published == 1 })
		ms := collect(t, reader)
		if got := gaugeValue(t, ms[outbox.MetricBreakerState]); got != 0 {
			t.Errorf("%s = %v after recovery, want 0 (closed)", outbox.MetricBreakerState, got)
		}
		tr := ms[outbox.MetricBreakerTransitions]
		for _, state := range []string{"open", "half_open", "closed"} {
			if counterSum(tr, "state", state) == 0 {
				t.Errorf("no %s{state=%s} counted", outbox.MetricBreakerTransitions, state)
			}
		}
		if counterSum(tr, "topic", "t") == 0 {
			t.Errorf("no %s{topic=t} counted", outbox.MetricBreakerTransitions)
		}
		if !strings.Contains(logs.String(), "topic=t") {
			t.Errorf("the breaker's log lines do not name the topic:\n%s", logs.String())
		}
		for _, want := range []string{"circuit breaker opened", "circuit breaker half-open", "circuit breaker closed"} {
			if !strings.Contains(logs.String(), want) {
				t.Errorf("log lacks %q at WARN:\n%s", want, logs.String())
			}
		}
		lines := strings.Count(logs.String(), "publishing failed")
		if lines == 0 || lines > 3 {
			t.Errorf("%d WARN lines for failed publishing; want a few, rate-limited", lines)
		}
	})
}

func ptr[T any](v T) *T { return &v }

// TestRelayCountersStartAtZero: a new relay exports at zero every counter
// series whose attributes it knows (each outcome, lease gain and loss of
// the partitions it serves, and the breaker transitions without a topic),
// and a breaker state of 0 without a topic while it knows none, so
// dashboards have data and rate() counts the first event.
func TestRelayCountersStartAtZero(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	b := memory.New(memory.Options{Partitions: 4})
	if _, err := outbox.NewRelay(b, outbox.ChannelSink(make(chan outbox.Entry)), outbox.RelayOptions{
		MeterProvider: mp, Partitions: []int{1, 3}, Logger: slog.New(slog.DiscardHandler),
	}); err != nil {
		t.Fatal(err)
	}
	ms := collect(t, reader)
	attrs := func(kv ...string) string {
		var s []attribute.KeyValue
		for i := 0; i < len(kv); i += 2 {
			if kv[i] == "partition" {
				var p int
				_, _ = fmt.Sscan(kv[i+1], &p)
				s = append(s, attribute.Int(kv[i], p))
			} else {
				s = append(s, attribute.String(kv[i], kv[i+1]))
			}
		}
		set := attribute.NewSet(s...)
		return set.Encoded(attribute.DefaultEncoder())
	}
	want := map[string][]string{
		outbox.MetricEntries: {
			attrs("partition", "1", "outcome", "sent"), attrs("partition", "1", "outcome", "retried"), attrs("partition", "1", "outcome", "parked"), attrs("partition", "1", "outcome", "deferred"),
			attrs("partition", "3", "outcome", "sent"), attrs("partition", "3", "outcome", "retried"), attrs("partition", "3", "outcome", "parked"), attrs("partition", "3", "outcome", "deferred"),
		},
		outbox.MetricLeaseAcquired:      {attrs("partition", "1"), attrs("partition", "3")},
		outbox.MetricLeaseLost:          {attrs("partition", "1"), attrs("partition", "3")},
		outbox.MetricBreakerTransitions: {attrs("state", "open"), attrs("state", "half_open"), attrs("state", "closed")},
	}
	for name, series := range want {
		d, ok := ms[name].Data.(metricdata.Sum[int64])
		if !ok {
			t.Errorf("%s: not exported by a new relay (%T)", name, ms[name].Data)
			continue
		}
		var got []string
		for _, dp := range d.DataPoints {
			got = append(got, dp.Attributes.Encoded(attribute.DefaultEncoder()))
			if dp.Value != 0 {
				t.Errorf("%s{%s} = %d on a new relay, want 0", name, got[len(got)-1], dp.Value)
			}
		}
		slices.Sort(got)
		slices.Sort(series)
		if !slices.Equal(got, series) {
			t.Errorf("%s series = %q, want %q", name, got, series)
		}
	}
	if d, ok := ms[outbox.MetricBreakerState].Data.(metricdata.Gauge[int64]); !ok || len(d.DataPoints) != 1 || d.DataPoints[0].Value != 0 || d.DataPoints[0].Attributes.Len() != 0 {
		t.Errorf("%s on a new relay = %+v, want one point 0 without attributes", outbox.MetricBreakerState, ms[outbox.MetricBreakerState].Data)
	}
}
