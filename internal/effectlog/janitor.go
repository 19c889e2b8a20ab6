package effectlog

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/outboxrelay/outbox/inbox"
)

// Meter is one inbox's metrics as the janitor tests read them: pass
// Provider to inbox.Options.MeterProvider.
type Meter struct {
	reader   *sdkmetric.ManualReader
	Provider *sdkmetric.MeterProvider
}

// NewMeter returns a Meter with its own reader and provider.
func NewMeter() Meter {
	r := sdkmetric.NewManualReader()
	return Meter{reader: r, Provider: sdkmetric.NewMeterProvider(sdkmetric.WithReader(r))}
}

// Collect returns the metrics by name.
func (m Meter) Collect(t testing.TB) map[string]metricdata.Metrics {
	t.Helper()
	var rm metricdata.ResourceMetrics
	require.NoError(t, m.reader.Collect(context.Background(), &rm))
	out := map[string]metricdata.Metrics{}
	for _, sm := range rm.ScopeMetrics {
		for _, x := range sm.Metrics {
			out[x.Name] = x
		}
	}
	return out
}

// PurgedIDs is outbox.inbox.purged of kind id (0 before a janitor ran).
func (m Meter) PurgedIDs(t testing.TB) int64 {
	t.Helper()
	d, _ := m.Collect(t)[inbox.MetricPurged].Data.(metricdata.Sum[int64])
	for _, dp := range d.DataPoints {
		if v, ok := dp.Attributes.Value(attribute.Key("kind")); ok && v.AsString() == "id" {
			return dp.Value
		}
	}
	return 0
}

// ExportsOldest reports whether outbox.inbox.oldest_age is exported (a
// janitor runs and the store holds a record).
func (m Meter) ExportsOldest(t testing.TB) bool {
	t.Helper()
	_, ok := m.Collect(t)[inbox.MetricOldestAge]
	return ok
}

// OldRecords records n IDs named prefix-i in store, backdated by two
// hours, and returns them.
func OldRecords(t testing.TB, store *inbox.Memory, prefix string, n int) []string {
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
	return ids
}
