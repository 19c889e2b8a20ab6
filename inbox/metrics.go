package inbox

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// Metric names the inbox reports through OpenTelemetry, named like the
// relay's (outbox.relay.*). The meter is named
// "github.com/outboxrelay/outbox/inbox".
const (
	// MetricMessages counts messages by outcome (attribute "outcome":
	// applied, duplicate: skipped because applied before, late: applied
	// after later numbers of its key). Every outcome is exported at zero
	// from New on.
	MetricMessages = "outbox.inbox.messages"
	// MetricGaps counts sequence gaps found (one per message that skipped
	// numbers of its key), whatever the policy did with them.
	MetricGaps = "outbox.inbox.gaps"
	// MetricGapMissing counts the sequence numbers the gaps skipped.
	MetricGapMissing = "outbox.inbox.gap.missing"
	// MetricTxDuration is the duration of one transaction attempt of
	// Handle or HandleBatch (records, handler, commit), in seconds, by
	// result ("ok", "retry": a retryable conflict or a held gap, "failed").
	MetricTxDuration = "outbox.inbox.tx.duration"
	// MetricPurged counts what the janitor removed (attribute "kind": id,
	// key).
	MetricPurged = "outbox.inbox.purged"
	// MetricOldestAge is the age, in seconds, of the oldest record of a
	// store that implements [OldestReporter], as [RunJanitor] last read it
	// (once per round), exported while the janitor runs; absent when the
	// store is empty, when the last read failed, and from a process whose
	// janitor is not running.
	MetricOldestAge = "outbox.inbox.oldest_age"
)

// meterName is the name of the inbox's meter.
const meterName = "github.com/outboxrelay/outbox/inbox"

// durationBuckets are the histogram bucket bounds in seconds, as the
// relay's: sub-millisecond to a minute.
var durationBuckets = []float64{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}

var (
	attrApplied   = metric.WithAttributes(attribute.String("outcome", "applied"))
	attrDuplicate = metric.WithAttributes(attribute.String("outcome", "duplicate"))
	attrLate      = metric.WithAttributes(attribute.String("outcome", "late"))
	attrOK        = metric.WithAttributes(attribute.String("result", "ok"))
	attrRetry     = metric.WithAttributes(attribute.String("result", "retry"))
	attrFailed    = metric.WithAttributes(attribute.String("result", "failed"))
	attrID        = metric.WithAttributes(attribute.String("kind", "id"))
	attrKey       = metric.WithAttributes(attribute.String("kind", "key"))
)

type metrics struct {
	messages metric.Int64Counter
	gaps     metric.Int64Counter
	missing  metric.Int64Counter
	duration metric.Float64Histogram
	purged   metric.Int64Counter
}

func newMetrics(mp metric.MeterProvider) (*metrics, error) {
	m := mp.Meter(meterName)
	var im metrics
	var err error
	if im.messages, err = m.Int64Counter(MetricMessages, metric.WithDescription("Messages handled by the inbox, by outcome."), metric.WithUnit("{message}")); err != nil {
		return nil, err
	}
	if im.gaps, err = m.Int64Counter(MetricGaps, metric.WithDescription("Messages whose per-key sequence number skipped numbers of their key."), metric.WithUnit("{gap}")); err != nil {
		return nil, err
	}
	if im.missing, err = m.Int64Counter(MetricGapMissing, metric.WithDescription("Sequence numbers skipped by gaps."), metric.WithUnit("{number}")); err != nil {
		return nil, err
	}
	if im.duration, err = m.Float64Histogram(MetricTxDuration, metric.WithDescription("Duration of one inbox transaction attempt."),
		metric.WithUnit("s"), metric.WithExplicitBucketBoundaries(durationBuckets...)); err != nil {
		return nil, err
	}
	if im.purged, err = m.Int64Counter(MetricPurged, metric.WithDescription("Inbox records removed by the janitor, by kind."), metric.WithUnit("{record}")); err != nil {
		return nil, err
	}
	ctx := context.Background()
	for _, a := range []metric.AddOption{attrApplied, attrDuplicate, attrLate} {
		im.messages.Add(ctx, 0, a)
	}
	im.gaps.Add(ctx, 0)
	im.missing.Add(ctx, 0)
	return &im, nil
}

func (m *metrics) result(ctx context.Context, r Result) {
	switch {
	case r.Outcome == Duplicate:
		m.messages.Add(ctx, 1, attrDuplicate)
	case r.Late:
		m.messages.Add(ctx, 1, attrLate)
	default:
		m.messages.Add(ctx, 1, attrApplied)
	}
	if r.Gap != nil {
		m.gaps.Add(ctx, 1)
		m.missing.Add(ctx, r.Gap.Missing())
	}
}

// txDone records one transaction attempt: ok, retried (a retryable
// conflict or a held gap) or failed.
func (m *metrics) txDone(ctx context.Context, d time.Duration, ok, retried bool) {
	a := attrFailed
	switch {
	case ok:
		a = attrOK
	case retried:
		a = attrRetry
	}
	m.duration.Record(ctx, d.Seconds(), a)
}

func (m *metrics) purgedRecords(ctx context.Context, ids, keys int) {
	m.purged.Add(ctx, int64(ids), attrID)
	m.purged.Add(ctx, int64(keys), attrKey)
}

// oldestGauge exports MetricOldestAge for a janitor: the oldest record's
// time as the last read found it, aged at each collection. Without an
// OldestReporter it does nothing.
type oldestGauge struct {
	r   OldestReporter // nil: the store cannot tell
	reg metric.Registration

	mu sync.Mutex // guards at and ok
	at time.Time
	ok bool
}

func newOldestGauge[Tx any](mp metric.MeterProvider, store Store[Tx]) (*oldestGauge, error) {
	g := &oldestGauge{}
	r, ok := store.(OldestReporter)
	if !ok {
		return g, nil
	}
	g.r = r
	m := mp.Meter(meterName)
	age, err := m.Float64ObservableGauge(MetricOldestAge, metric.WithDescription("Age of the inbox store's oldest record, as the janitor last read it."), metric.WithUnit("s"))
	if err != nil {
		return nil, err
	}
	g.reg, err = m.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		g.mu.Lock()
		at, ok := g.at, g.ok
		g.mu.Unlock()
		if ok {
			o.ObserveFloat64(age, max(0, time.Since(at).Seconds()))
		}
		return nil
	}, age)
	if err != nil {
		return nil, err
	}
	return g, nil
}

// read asks the store for its oldest record; a failure is logged and
// leaves the gauge absent.
func (g *oldestGauge) read(ctx context.Context, log *slog.Logger) {
	if g.r == nil {
		return
	}
	at, ok, err := g.r.Oldest(ctx)
	if err != nil {
		ok = false
		if ctx.Err() == nil {
			log.WarnContext(ctx, "inbox: janitor could not read the oldest record's time; outbox.inbox.oldest_age is absent until the next round", "err", err)
		}
	}
	g.mu.Lock()
	g.at, g.ok = at, ok
	g.mu.Unlock()
}

// close stops exporting the gauge.
func (g *oldestGauge) close() {
	if g.reg != nil {
		_ = g.reg.Unregister()
	}
}
