package outbox

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// SpanPublish is the name of the span the relay starts for each publish
// round (tracer "github.com/outboxrelay/outbox").
const SpanPublish = "outbox.relay.publish"

// startPublishSpan starts the span of one publish round, linked to the
// appending span of every entry that carries a trace context.
func startPublishSpan(ctx context.Context, tracer trace.Tracer, partition int, round []Entry) (context.Context, trace.Span) {
	var links []trace.Link
	for _, e := range round {
		if e.Headers[HeaderTraceparent] == "" {
			continue
		}
		sc := trace.SpanContextFromContext(propagation.TraceContext{}.Extract(context.Background(), propagation.MapCarrier(e.Headers)))
		if sc.IsValid() {
			links = append(links, trace.Link{SpanContext: sc, Attributes: []attribute.KeyValue{attribute.String("outbox.entry.id", e.ID)}})
		}
	}
	return tracer.Start(ctx, SpanPublish,
		trace.WithSpanKind(trace.SpanKindProducer),
		trace.WithLinks(links...),
		trace.WithAttributes(
			attribute.Int("outbox.partition", partition),
			attribute.Int("messaging.batch.message_count", len(round)),
		))
}

// endPublishSpan records a round's failures on its span and ends it.
func endPublishSpan(span trace.Span, failed, parked int) {
	if failed > 0 {
		span.SetAttributes(attribute.Int("outbox.failed", failed), attribute.Int("outbox.parked", parked))
		span.SetStatus(codes.Error, "some messages failed")
	}
	span.End()
}

// Metric names the relay reports through OpenTelemetry. The meter is named
// "github.com/outboxrelay/outbox".
const (
	// MetricEntries counts entries by outcome (attribute "outcome": sent,
	// retried, parked) and partition.
	MetricEntries = "outbox.relay.entries"
	// MetricPublishDuration is the duration of one Sink.Publish call, in
	// seconds.
	MetricPublishDuration = "outbox.relay.publish.duration"
	// MetricLeaseLost counts leases lost while held, by partition.
	MetricLeaseLost = "outbox.relay.lease.lost"
	// MetricPartitionsHeld is the number of partitions the relay holds.
	MetricPartitionsHeld = "outbox.relay.partitions.held"
)

type relayMetrics struct {
	entries  metric.Int64Counter
	duration metric.Float64Histogram
	lost     metric.Int64Counter
}

func newRelayMetrics(mp metric.MeterProvider, r *Relay) (*relayMetrics, error) {
	m := mp.Meter("github.com/outboxrelay/outbox")
	var rm relayMetrics
	var err error
	if rm.entries, err = m.Int64Counter(MetricEntries, metric.WithDescription("Outbox entries handled by the relay, by outcome."), metric.WithUnit("{entry}")); err != nil {
		return nil, err
	}
	if rm.duration, err = m.Float64Histogram(MetricPublishDuration, metric.WithDescription("Duration of one publish round."), metric.WithUnit("s")); err != nil {
		return nil, err
	}
	if rm.lost, err = m.Int64Counter(MetricLeaseLost, metric.WithDescription("Partition leases lost while held."), metric.WithUnit("{lease}")); err != nil {
		return nil, err
	}
	if _, err = m.Int64ObservableGauge(MetricPartitionsHeld, metric.WithDescription("Partitions leased by this relay."),
		metric.WithInt64Callback(func(_ context.Context, o metric.Int64Observer) error {
			o.Observe(r.held.Load())
			return nil
		})); err != nil {
		return nil, err
	}
	return &rm, nil
}

func (m *relayMetrics) outcome(ctx context.Context, partition int, outcome string, n int) {
	if n == 0 {
		return
	}
	m.entries.Add(ctx, int64(n), metric.WithAttributes(attribute.Int("partition", partition), attribute.String("outcome", outcome)))
}

func (m *relayMetrics) published(ctx context.Context, partition int, d time.Duration) {
	m.duration.Record(ctx, d.Seconds(), metric.WithAttributes(attribute.Int("partition", partition)))
}

func (m *relayMetrics) leaseLost(partition int) {
	m.lost.Add(context.Background(), 1, metric.WithAttributes(attribute.Int("partition", partition)))
}
