package amqpinbox_test

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/outboxrelay/outbox/inbox"
	"github.com/outboxrelay/outbox/sinks/amqp/amqpinbox"
)

// meter is one consumer's inbox metrics.
type meter struct{ r *sdkmetric.ManualReader }

func (m meter) collect(t *testing.T) map[string]metricdata.Metrics {
	t.Helper()
	var rm metricdata.ResourceMetrics
	require.NoError(t, m.r.Collect(context.Background(), &rm))
	out := map[string]metricdata.Metrics{}
	for _, sm := range rm.ScopeMetrics {
		for _, x := range sm.Metrics {
			out[x.Name] = x
		}
	}
	return out
}

// purgedIDs is outbox.inbox.purged of kind id (0 before a janitor ran).
func (m meter) purgedIDs(t *testing.T) int64 {
	t.Helper()
	d, _ := m.collect(t)[inbox.MetricPurged].Data.(metricdata.Sum[int64])
	for _, dp := range d.DataPoints {
		if v, ok := dp.Attributes.Value(attribute.Key("kind")); ok && v.AsString() == "id" {
			return dp.Value
		}
	}
	return 0
}

// exportsOldest: outbox.inbox.oldest_age is exported (a janitor runs and
// the store holds a record).
func (m meter) exportsOldest(t *testing.T) bool {
	t.Helper()
	_, ok := m.collect(t)[inbox.MetricOldestAge]
	return ok
}

// oldRecords records n IDs prefix-i in store, backdated by two hours.
func oldRecords(t *testing.T, store *inbox.Memory, prefix string, n int) {
	t.Helper()
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("%s-%d", prefix, i)
	}
	require.NoError(t, store.InTx(context.Background(), func(ctx context.Context, tx *inbox.MemoryTx) error {
		_, err := store.Record(ctx, tx, ids)
		return err
	}))
	store.Backdate(2*time.Hour, ids, nil)
}

// Every Consumer with Options.Retention runs a janitor for as long as its
// Run runs (a queue gives no ownership to elect one by): two consumers of
// one queue over one store both run one (both export
// outbox.inbox.oldest_age), together they remove every old record, each
// counted once, and each janitor stops with its Run.
func TestRetentionRunsAJanitorOnEveryConsumer(t *testing.T) {
	t.Parallel()
	tp := newTopo(t, nil)
	store := inbox.NewMemory()
	var meters []meter
	var stops []func() error
	for range 2 {
		m := meter{sdkmetric.NewManualReader()}
		ib, err := inbox.New(store, inbox.Options{Logger: quietLogger(), MeterProvider: sdkmetric.NewMeterProvider(sdkmetric.WithReader(m.r))})
		require.NoError(t, err)
		_, ch := tp.channel()
		c, err := amqpinbox.NewConsumer(ib, newEffects().Handler(isDelivery, nil), ch, tp.queue, amqpinbox.Options{
			Retention: time.Hour, JanitorInterval: 10 * time.Millisecond, Logger: quietLogger(),
		})
		require.NoError(t, err)
		meters = append(meters, m)
		stop, _ := runConsumer(t, c)
		stops = append(stops, stop)
	}
	total := func() int64 { return meters[0].purgedIDs(t) + meters[1].purgedIDs(t) }
	for round := range 5 {
		oldRecords(t, store, fmt.Sprintf("old%d", round), 40)
		want := int64(40 * (round + 1))
		eventually(t, fmt.Sprintf("the janitors removed %d old records", want), func() bool { return total() >= want })
		require.Equal(t, want, total(), "records removed, counted over both janitors")
	}
	require.NoError(t, store.InTx(context.Background(), func(ctx context.Context, tx *inbox.MemoryTx) error {
		_, err := store.Record(ctx, tx, []string{"fresh"})
		return err
	}))
	eventually(t, "both janitors exporting the oldest record's age", func() bool {
		return meters[0].exportsOldest(t) && meters[1].exportsOldest(t)
	})
	for i, stop := range stops {
		require.NoError(t, stop())
		require.False(t, meters[i].exportsOldest(t), "consumer %d's janitor exports after its Run returned", i)
	}
}

// eventually polls cond every 20ms, failing the test after a minute (a
// watchdog, not a timing assertion).
func eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("after a minute: %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// quietLogger drops every line.
func quietLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }
