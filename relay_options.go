package outbox

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/outboxrelay/outbox/backoff"
)

// RelayOptions configures a [Relay]. The zero value is usable: every zero
// field takes its documented default.
type RelayOptions struct {
	// Owner is this relay's lease owner token. It must be unique among the
	// relays of one outbox. Default: host name, process ID and 8 random
	// bytes.
	Owner string

	// BatchSize is the most entries fetched from a partition at once.
	// Default 500.
	BatchSize int

	// MaxInFlight bounds the messages handed to the sink at once by one
	// partition worker (one Sink.Publish call). Default 500.
	MaxInFlight int

	// PollInterval is how often an idle partition worker looks for due
	// entries when no notification wakes it. Default 1s.
	PollInterval time.Duration

	// LeaseTTL is the lease duration asked for each partition, and how
	// long a relay's heartbeat record lasts. A dead relay's partitions (and
	// their claimed entries) come back to other relays after about
	// LeaseTTL. With a sink that declares a landing bound
	// ([LandingBounder]), LeaseTTL must exceed RenewMargin plus that bound.
	// Default 30s.
	LeaseTTL time.Duration

	// RenewMargin: the relay renews a lease once less than RenewMargin
	// (plus the sink's landing bound) of it is left, also while a publish
	// is in flight, and starts no new publish round on a lease it could not
	// renew that has less than that left. Default LeaseTTL/3; must be
	// below LeaseTTL.
	RenewMargin time.Duration

	// Partitions lists the partitions this relay tries to lease. Default
	// all of them (0 .. Store.Partitions()-1), shared with the other relays
	// of the outbox through the store's [Membership]. An explicit list turns
	// sharing off: the relay does not join the fleet's membership and takes
	// every listed partition it can lease (do not mix such relays with
	// sharing ones on one outbox: the sharing relays do not count them).
	Partitions []int

	// MaxPartitions caps the partitions this relay holds at once. With
	// [Membership], the fleet's shares respect every relay's cap as long
	// as the caps together cover all partitions; when they do not, the
	// partitions left over are spread over all live relays anyway (logged
	// at WARN, and RelayStats.PartitionsTarget shows it): no partition is
	// left without a holder while a relay is alive. Without Membership the
	// cap is strict, and partitions can stay unowned when relays leave (a
	// WARN at start says so). Default: no limit.
	MaxPartitions int

	// AcquireInterval is how often the relay records its heartbeat and
	// re-balances (with Membership), or tries to lease the partitions it
	// does not hold (without). With Membership, a relay that died without
	// releasing has its partitions taken over about LeaseTTL after its last
	// heartbeat (the others look again just after its record expires, and
	// every AcquireInterval/4 while its leases run out); without, within
	// about LeaseTTL plus AcquireInterval. Default LeaseTTL/3.
	AcquireInterval time.Duration

	// Backoff computes retry delays and the attempt limit. The zero value
	// takes backoff's defaults (500ms base, 5m cap, 20 attempts).
	Backoff backoff.Policy

	// Unordered turns per-key ordering off: the entries of one key may
	// then be published concurrently and out of order. Default false.
	Unordered bool

	// BreakerThreshold is how many consecutive publish rounds of one
	// partition worker in which every message of a topic failed with a
	// non-permanent error (no round of the topic succeeding in between, on
	// any worker) open that topic's circuit breaker (one breaker per
	// topic, shared by the partition workers). While open, the relay publishes none of the
	// topic's entries for BreakerCooldown (other topics go on), then lets
	// one round of them through to probe. While another topic's breaker
	// is closed, the topic's entries are re-scheduled with backoff without
	// being published (an attempt counted, not before the probe); while
	// none is, they are left as they are (a broker outage burns no
	// attempts). See docs/design.md. Default 5; negative disables the
	// breakers.
	BreakerThreshold int

	// BreakerCooldown is how long a breaker stays open. Default 5s.
	BreakerCooldown time.Duration

	// BackpressureScale multiplies the retry delays of a topic's entries
	// scheduled while its breaker is open or half-open, so a struggling
	// broker is not hammered. Default 4; values below 1 count as 1.
	BackpressureScale float64

	// StatsInterval bounds how often the relay samples the store's
	// Inspector.Stats for the outbox gauges (MetricPending, MetricDue,
	// MetricParked, MetricLag): a sample is taken when the metrics are
	// collected and the last one is older than StatsInterval, so at most one
	// Stats call per interval (on Postgres one query, on Redis one script
	// per partition), and none while nobody collects the metrics. Default
	// 15s; negative turns the gauges off. Without Inspector there are no
	// such gauges.
	StatsInterval time.Duration

	// Logger receives the relay's logs. Default slog.Default().
	Logger *slog.Logger

	// MeterProvider provides the relay's metrics instruments. Default the
	// global otel.GetMeterProvider().
	MeterProvider metric.MeterProvider

	// TracerProvider provides the tracer of the relay's spans: one span
	// per publish round, linked to the trace of every entry's appending
	// span (its "traceparent" header). Default the global
	// otel.GetTracerProvider().
	TracerProvider trace.TracerProvider

	// Now is the relay's clock, for tests. Default time.Now.
	Now func() time.Time
}

func (o RelayOptions) withDefaults() (RelayOptions, error) {
	if o.Owner == "" {
		host, _ := os.Hostname()
		var b [8]byte
		_, _ = rand.Read(b[:])
		o.Owner = fmt.Sprintf("%s-%d-%s", host, os.Getpid(), hex.EncodeToString(b[:]))
	}
	if o.BatchSize == 0 {
		o.BatchSize = 500
	}
	if o.MaxInFlight == 0 {
		o.MaxInFlight = 500
	}
	if o.PollInterval == 0 {
		o.PollInterval = time.Second
	}
	if o.LeaseTTL == 0 {
		o.LeaseTTL = 30 * time.Second
	}
	if o.RenewMargin == 0 {
		o.RenewMargin = o.LeaseTTL / 3
	}
	if o.AcquireInterval == 0 {
		o.AcquireInterval = o.LeaseTTL / 3
	}
	if o.BreakerThreshold == 0 {
		o.BreakerThreshold = 5
	}
	if o.BreakerCooldown == 0 {
		o.BreakerCooldown = 5 * time.Second
	}
	if o.BackpressureScale < 1 {
		o.BackpressureScale = 4
	}
	if o.StatsInterval == 0 {
		o.StatsInterval = 15 * time.Second
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.MeterProvider == nil {
		o.MeterProvider = otel.GetMeterProvider()
	}
	if o.TracerProvider == nil {
		o.TracerProvider = otel.GetTracerProvider()
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("outbox: RelayOptions."+format, args...))
	}
	if o.BatchSize < 0 {
		bad("BatchSize is %d; use a positive size or 0 for the default", o.BatchSize)
	}
	if o.MaxInFlight < 0 {
		bad("MaxInFlight is %d; use a positive bound or 0 for the default", o.MaxInFlight)
	}
	if o.PollInterval < 0 || o.LeaseTTL < 0 || o.RenewMargin < 0 || o.AcquireInterval < 0 || o.BreakerCooldown < 0 {
		bad("durations must not be negative")
	}
	if o.RenewMargin >= o.LeaseTTL {
		bad("RenewMargin (%v) must be below LeaseTTL (%v)", o.RenewMargin, o.LeaseTTL)
	}
	if o.MaxPartitions < 0 {
		bad("MaxPartitions is %d; use a positive limit or 0 for no limit", o.MaxPartitions)
	}
	if err := o.Backoff.Validate(); err != nil {
		errs = append(errs, fmt.Errorf("outbox: RelayOptions.Backoff: %w", err))
	}
	return o, errors.Join(errs...)
}
