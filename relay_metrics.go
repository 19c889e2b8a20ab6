package outbox

import (
	"context"
	"errors"
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
// "github.com/outboxrelay/outbox". Histograms carry no partition attribute
// (bounded cardinality); counters carry the partition.
const (
	// MetricEntries counts entries by outcome (attribute "outcome": sent,
	// retried, parked, and deferred: not handed to the sink because its
	// topic's circuit breaker is open, re-scheduled without counting an
	// attempt) and partition. Every outcome of every partition the relay
	// serves (RelayOptions.Partitions) is exported at zero from NewRelay
	// on.
	MetricEntries = "outbox.relay.entries"
	// MetricPublishDuration is the duration of one Sink.Publish call (one
	// publish round), in seconds, by result ("ok": every message
	// acknowledged; "failed": at least one failed).
	MetricPublishDuration = "outbox.relay.publish.duration"
	// MetricCommitToPublish is the time from an entry's CreatedAt (its
	// commit, by the store's clock) to the sink's acknowledgement (by the
	// relay's clock), in seconds: the end-to-end latency of the outbox,
	// retries included. Clock skew between store and relay shifts it.
	MetricCommitToPublish = "outbox.relay.commit_to_publish"
	// MetricLeaseAcquired counts partition leases this relay gained, by
	// partition (every partition the relay serves, from zero).
	MetricLeaseAcquired = "outbox.relay.lease.acquired"
	// MetricLeaseLost counts leases lost while held, by partition (every
	// partition the relay serves, from zero).
	MetricLeaseLost = "outbox.relay.lease.lost"
	// MetricPartitionsHeld is the number of partitions the relay holds.
	MetricPartitionsHeld = "outbox.relay.partitions.held"
	// MetricPartitionsTarget is the number of partitions the relay aims to
	// hold (its share of the fleet, see RelayStats.PartitionsTarget).
	MetricPartitionsTarget = "outbox.relay.partitions.target"
	// MetricMembers is the number of live relays the relay saw at its last
	// heartbeat (0 without Membership).
	MetricMembers = "outbox.relay.members"
	// MetricBreakerState is the state of each topic's circuit breaker
	// (attribute "topic"): 0 closed, 1 open, 2 half-open (probing). A
	// topic appears once the relay has published to it; until then one
	// series without the attribute reports 0 (no breaker is open).
	MetricBreakerState = "outbox.relay.breaker.state"
	// MetricBreakerTransitions counts the breakers' state changes, by
	// topic and state entered (attributes "topic", and "state": open,
	// half_open, closed). The three states without a topic attribute are
	// exported at zero from NewRelay on, so the series exist before any
	// topic is known; a topic's series start at its first transition.
	MetricBreakerTransitions = "outbox.relay.breaker.transitions"
	// MetricPausedTopic is 1 for each topic paused in the store
	// ([Pauser]) as the relay last read it (attribute "topic"), at most
	// PollInterval ago; a topic's series ends when it is resumed. While no
	// topic is paused (always, for a store that is not a Pauser), one
	// series without the attribute reports 0, so the metric exists on
	// every relay.
	MetricPausedTopic = "outbox.relay.paused.topic"
	// MetricPausedPartition is 1 for each partition paused in the store
	// (attribute "partition"), as MetricPausedTopic is for topics (one
	// series without the attribute reports 0 while none is paused).
	MetricPausedPartition = "outbox.relay.paused.partition"

	// MetricPending, MetricDue, MetricParked and MetricLag are the outbox's
	// own gauges, from a store that implements Inspector: sampled when the
	// metrics are collected, at most once per RelayOptions.StatsInterval
	// (one Stats call per interval per relay, none when nobody collects):
	// entries not yet sent (parked excluded), those due now, parked
	// entries, and the age in seconds of the oldest due entry (0 when none
	// is due).
	MetricPending = "outbox.pending"
	MetricDue     = "outbox.due"
	MetricParked  = "outbox.parked"
	MetricLag     = "outbox.lag"

	// MetricRetentionRemoved counts the entries the relay's retention
	// rounds removed (RelayOptions.ArchiveRetention and ParkedRetention),
	// by kind (attribute "kind": archived, parked). Only the relay holding
	// partition 0 removes entries; the kinds its options enable are
	// exported at zero from NewRelay on, on every relay.
	MetricRetentionRemoved = "outbox.retention.removed"
	// MetricArchiveOldestAge is the age in seconds of the oldest entry in
	// the store's archive (ArchiveJanitor.OldestArchived), absent while the
	// archive is empty. Every relay over a store that implements
	// ArchiveJanitor reports it (the figure is the store's, as
	// MetricPending is), sampled like MetricPending at most once per
	// RelayOptions.StatsInterval when the metrics are collected; a
	// negative StatsInterval turns it off.
	MetricArchiveOldestAge = "outbox.archive.oldest_age"

	// MetricTableSize, MetricTableDeadRows and MetricTableVacuums are the
	// figures of each of the store's tables (attribute "table") from the
	// last HealthChecker.Health reading (see RelayOptions.HealthInterval):
	// its size with its indexes in bytes, its dead rows and its vacuums
	// (a figure the store cannot tell, -1, is not reported).
	// MetricMemoryUsed (bytes) and MetricMemoryFragmentation (ratio) are
	// the server's memory, for stores that report it (Redis). Every relay
	// over a store that implements HealthChecker reports them; a reading
	// older than three HealthIntervals is not reported.
	MetricTableSize           = "outbox.store.table.size"
	MetricTableDeadRows       = "outbox.store.table.dead_rows"
	MetricTableVacuums        = "outbox.store.table.vacuums"
	MetricMemoryUsed          = "outbox.store.memory.used"
	MetricMemoryFragmentation = "outbox.store.memory.fragmentation"
	// MetricStoreWarning is 1 for each warning of the store's health that
	// holds as last read (attributes "code" and "object", see
	// HealthWarning); while none holds, one series without attributes
	// reports 0, so the metric exists on every relay over a store that
	// implements HealthChecker.
	MetricStoreWarning = "outbox.store.warning"
)

// durationBuckets are the histogram bucket bounds in seconds: sub-millisecond
// to a minute.
var durationBuckets = []float64{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}

type relayMetrics struct {
	entries     metric.Int64Counter
	duration    metric.Float64Histogram
	latency     metric.Float64Histogram
	acquired    metric.Int64Counter
	lost        metric.Int64Counter
	transitions metric.Int64Counter
	removed     metric.Int64Counter
}

func newRelayMetrics(mp metric.MeterProvider, r *Relay) (*relayMetrics, error) {
	m := mp.Meter("github.com/outboxrelay/outbox")
	var rm relayMetrics
	var errs []error
	check := func(err error) {
		if err != nil {
			errs = append(errs, err)
		}
	}
	var err error
	rm.entries, err = m.Int64Counter(MetricEntries, metric.WithDescription("Outbox entries handled by the relay, by outcome."), metric.WithUnit("{entry}"))
	check(err)
	rm.duration, err = m.Float64Histogram(MetricPublishDuration, metric.WithDescription("Duration of one publish round (one Sink.Publish call)."),
		metric.WithUnit("s"), metric.WithExplicitBucketBoundaries(durationBuckets...))
	check(err)
	rm.latency, err = m.Float64Histogram(MetricCommitToPublish, metric.WithDescription("Time from an entry's commit to the sink's acknowledgement."),
		metric.WithUnit("s"), metric.WithExplicitBucketBoundaries(durationBuckets...))
	check(err)
	rm.acquired, err = m.Int64Counter(MetricLeaseAcquired, metric.WithDescription("Partition leases gained by this relay."), metric.WithUnit("{lease}"))
	check(err)
	rm.lost, err = m.Int64Counter(MetricLeaseLost, metric.WithDescription("Partition leases lost while held."), metric.WithUnit("{lease}"))
	check(err)
	rm.transitions, err = m.Int64Counter(MetricBreakerTransitions, metric.WithDescription("Circuit breaker state changes, by topic and state entered."), metric.WithUnit("{transition}"))
	check(err)
	rm.removed, err = m.Int64Counter(MetricRetentionRemoved, metric.WithDescription("Entries removed by the retention rounds, by kind (archived, parked)."), metric.WithUnit("{entry}"))
	check(err)
	gauge := func(name, desc, unit string, value func(context.Context) (int64, bool)) {
		_, err := m.Int64ObservableGauge(name, metric.WithDescription(desc), metric.WithUnit(unit),
			metric.WithInt64Callback(func(ctx context.Context, o metric.Int64Observer) error {
				if v, ok := value(ctx); ok {
					o.Observe(v)
				}
				return nil
			}))
		check(err)
	}
	always := func(f func() int64) func(context.Context) (int64, bool) {
		return func(context.Context) (int64, bool) { return f(), true }
	}
	gauge(MetricPartitionsHeld, "Partitions leased by this relay.", "{partition}", always(r.counts.held.Load))
	gauge(MetricPartitionsTarget, "Partitions this relay aims to hold.", "{partition}", always(r.coord.targetCount))
	gauge(MetricMembers, "Live relays of the fleet at the last heartbeat.", "{relay}", always(r.coord.membersSeen))
	_, err = m.Int64ObservableGauge(MetricBreakerState, metric.WithDescription("Circuit breaker state per topic: 0 closed, 1 open, 2 half-open."), metric.WithUnit("{state}"),
		metric.WithInt64Callback(func(_ context.Context, o metric.Int64Observer) error {
			topics := 0
			r.breakers.states(func(topic string, state int64) {
				topics++
				o.Observe(state, metric.WithAttributes(attribute.String("topic", topic)))
			})
			if topics == 0 {
				o.Observe(breakerClosed) // no topic yet: nothing is open
			}
			return nil
		}))
	check(err)
	_, err = m.Int64ObservableGauge(MetricPausedTopic, metric.WithDescription("1 for each topic paused in the store, by topic."), metric.WithUnit("{topic}"),
		metric.WithInt64Callback(func(_ context.Context, o metric.Int64Observer) error {
			topics := r.coord.pauses.current().topicSet()
			for topic := range topics {
				o.Observe(1, metric.WithAttributes(attribute.String("topic", topic)))
			}
			if len(topics) == 0 {
				o.Observe(0) // nothing paused
			}
			return nil
		}))
	check(err)
	_, err = m.Int64ObservableGauge(MetricPausedPartition, metric.WithDescription("1 for each partition paused in the store, by partition."), metric.WithUnit("{partition}"),
		metric.WithInt64Callback(func(_ context.Context, o metric.Int64Observer) error {
			parts := r.coord.pauses.current().partitionSet()
			for p := range parts {
				o.Observe(1, metric.WithAttributes(attribute.Int("partition", p)))
			}
			if len(parts) == 0 {
				o.Observe(0) // nothing paused
			}
			return nil
		}))
	check(err)
	if r.sampler != nil {
		s := r.sampler
		gauge(MetricPending, "Outbox entries not yet sent, parked excluded.", "{entry}", s.value(func(st Stats) int64 { return st.Pending }))
		gauge(MetricDue, "Outbox entries due now.", "{entry}", s.value(func(st Stats) int64 { return st.Due }))
		gauge(MetricParked, "Parked outbox entries.", "{entry}", s.value(func(st Stats) int64 { return st.Parked }))
		_, err := m.Float64ObservableGauge(MetricLag, metric.WithDescription("Age of the oldest due outbox entry."), metric.WithUnit("s"),
			metric.WithFloat64Callback(func(ctx context.Context, o metric.Float64Observer) error {
				if lag, ok := s.lag(ctx); ok {
					o.Observe(lag.Seconds())
				}
				return nil
			}))
		check(err)
	}
	check(registerRetentionGauges(m, r))
	check(registerHealthGauges(m, r.health))
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	rm.startAtZero(r.opts.Partitions)
	if r.janitor != nil {
		for _, kind := range r.janitor.removable() {
			rm.removed.Add(context.Background(), 0, metric.WithAttributes(attribute.String("kind", kind)))
		}
	}
	return &rm, nil
}

// registerRetentionGauges registers MetricArchiveOldestAge when the relay
// samples the archive's age.
func registerRetentionGauges(m metric.Meter, r *Relay) error {
	if r.archiveAge == nil {
		return nil
	}
	a := r.archiveAge
	_, err := m.Float64ObservableGauge(MetricArchiveOldestAge, metric.WithDescription("Age of the oldest archived outbox entry."), metric.WithUnit("s"),
		metric.WithFloat64Callback(func(ctx context.Context, o metric.Float64Observer) error {
			if age, ok := a.age(ctx); ok {
				o.Observe(age.Seconds())
			}
			return nil
		}))
	return err
}

// registerHealthGauges registers the store health gauges of h (none when
// h is nil).
func registerHealthGauges(m metric.Meter, h *healthWatch) error {
	if h == nil {
		return nil
	}
	var errs []error
	table := func(name, desc, unit string, f func(TableHealth) int64) {
		_, err := m.Int64ObservableGauge(name, metric.WithDescription(desc), metric.WithUnit(unit),
			metric.WithInt64Callback(func(_ context.Context, o metric.Int64Observer) error {
				hl, ok := h.current()
				if !ok {
					return nil
				}
				for _, t := range hl.Tables {
					if v := f(t); v >= 0 {
						o.Observe(v, metric.WithAttributes(attribute.String("table", t.Name)))
					}
				}
				return nil
			}))
		errs = append(errs, err)
	}
	table(MetricTableSize, "Size of the store's table with its indexes.", "By", func(t TableHealth) int64 { return t.Bytes })
	table(MetricTableDeadRows, "Dead rows of the store's table, not yet reclaimed by vacuum.", "{row}", func(t TableHealth) int64 { return t.DeadRows })
	table(MetricTableVacuums, "Vacuums of the store's table since the server's statistics were reset.", "{vacuum}", func(t TableHealth) int64 { return t.Vacuums })
	_, err := m.Int64ObservableGauge(MetricMemoryUsed, metric.WithDescription("Memory the store's server holds for data."), metric.WithUnit("By"),
		metric.WithInt64Callback(func(_ context.Context, o metric.Int64Observer) error {
			if hl, ok := h.current(); ok && hl.Memory != nil {
				o.Observe(hl.Memory.UsedBytes)
			}
			return nil
		}))
	errs = append(errs, err)
	_, err = m.Float64ObservableGauge(MetricMemoryFragmentation, metric.WithDescription("The store server's resident memory over its used memory."), metric.WithUnit("1"),
		metric.WithFloat64Callback(func(_ context.Context, o metric.Float64Observer) error {
			if hl, ok := h.current(); ok && hl.Memory != nil {
				o.Observe(hl.Memory.Fragmentation)
			}
			return nil
		}))
	errs = append(errs, err)
	_, err = m.Int64ObservableGauge(MetricStoreWarning, metric.WithDescription("1 for each warning of the store's health that holds, by code and object."), metric.WithUnit("{warning}"),
		metric.WithInt64Callback(func(_ context.Context, o metric.Int64Observer) error {
			ws := h.warnings()
			for _, w := range ws {
				o.Observe(1, metric.WithAttributes(attribute.String("code", w.Code), attribute.String("object", w.Object)))
			}
			if len(ws) == 0 {
				o.Observe(0) // no warning
			}
			return nil
		}))
	errs = append(errs, err)
	return errors.Join(errs...)
}

// startAtZero exports at zero every counter series whose attributes a
// relay knows before its first event: each outcome, lease gain and lease
// loss of the partitions it serves, and the breaker transitions without a
// topic (the topics are known only once entries are published). A counter
// that appears only at its first event leaves the dashboard's panels
// empty on a healthy relay, and rate() and increase() do not count that
// first event.
func (m *relayMetrics) startAtZero(partitions []int) {
	ctx := context.Background()
	for _, p := range partitions {
		part := attribute.Int("partition", p)
		for _, outcome := range []string{"sent", "retried", "parked", "deferred"} {
			m.entries.Add(ctx, 0, metric.WithAttributes(part, attribute.String("outcome", outcome)))
		}
		m.acquired.Add(ctx, 0, metric.WithAttributes(part))
		m.lost.Add(ctx, 0, metric.WithAttributes(part))
	}
	for _, state := range breakerStateNames {
		m.transitions.Add(ctx, 0, metric.WithAttributes(attribute.String("state", state)))
	}
}

func (m *relayMetrics) outcome(ctx context.Context, partition int, outcome string, n int) {
	if n == 0 {
		return
	}
	m.entries.Add(ctx, int64(n), metric.WithAttributes(attribute.Int("partition", partition), attribute.String("outcome", outcome)))
}

var (
	resultOK     = metric.WithAttributes(attribute.String("result", "ok"))
	resultFailed = metric.WithAttributes(attribute.String("result", "failed"))
)

func (m *relayMetrics) published(ctx context.Context, d time.Duration, failed bool) {
	opt := resultOK
	if failed {
		opt = resultFailed
	}
	m.duration.Record(ctx, d.Seconds(), opt)
}

func (m *relayMetrics) committedToPublished(ctx context.Context, d time.Duration) {
	m.latency.Record(ctx, max(d, 0).Seconds())
}

func (m *relayMetrics) leaseAcquired(partition int) {
	m.acquired.Add(context.Background(), 1, metric.WithAttributes(attribute.Int("partition", partition)))
}

func (m *relayMetrics) leaseLost(partition int) {
	m.lost.Add(context.Background(), 1, metric.WithAttributes(attribute.Int("partition", partition)))
}

func (m *relayMetrics) retentionRemoved(kind string, n int64) {
	m.removed.Add(context.Background(), n, metric.WithAttributes(attribute.String("kind", kind)))
}

func (m *relayMetrics) breakerEntered(topic, state string) {
	m.transitions.Add(context.Background(), 1, metric.WithAttributes(attribute.String("topic", topic), attribute.String("state", state)))
}
