package outbox

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"os"
	"runtime/debug"
	"slices"
	"strings"
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
	// Default [DefaultBatchSize].
	BatchSize int

	// MaxInFlight bounds the messages handed to the sink at once by one
	// partition worker (one Sink.Publish call). Default
	// [DefaultMaxInFlight].
	MaxInFlight int

	// PollInterval is how often an idle partition worker looks for due
	// entries when no notification wakes it, and, with a store that
	// implements [Pauser], how often the relay reads the paused topics and
	// partitions (it hands none of their entries to the sink from then
	// on). Default: the store's [PollAdvisor.PollInterval] when it
	// implements [PollAdvisor], else [DefaultPollInterval].
	PollInterval time.Duration

	// LeaseTTL is the lease duration asked for each partition, and how
	// long a relay's heartbeat record lasts. A dead relay's partitions (and
	// their claimed entries) come back to other relays after about
	// LeaseTTL. With a sink that declares a landing bound
	// ([LandingBounder]), LeaseTTL must exceed RenewMargin plus that bound.
	// Default [DefaultLeaseTTL].
	LeaseTTL time.Duration

	// RenewMargin: the relay renews a lease once less than RenewMargin
	// (plus the sink's landing bound) of it is left, also while a publish
	// is in flight, and starts no new publish round on a lease it could not
	// renew that has less than that left. Default LeaseTTL/3; must be
	// below LeaseTTL (less the sink's landing bound, see LeaseTTL).
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
	// is closed, the first entry of each of the topic's keys (and each
	// entry without a key) is deferred ([Failure.Deferred]): re-scheduled
	// with backoff, not before the probe, without being published and
	// without counting an attempt (its last error stays the sink's, and it
	// never parks for it), holding back the later entries of its key,
	// which are given back untouched; while none is, they are left as they
	// are (a broker outage burns no attempts). See docs/design.md. Default
	// [DefaultBreakerThreshold]; negative disables the breakers.
	BreakerThreshold int

	// BreakerCooldown is how long a breaker stays open. Default
	// [DefaultBreakerCooldown].
	BreakerCooldown time.Duration

	// BackpressureScale multiplies the retry delays of a topic's entries
	// scheduled while its breaker is open or half-open, so a struggling
	// broker is not hammered. Default [DefaultBackpressureScale], which
	// values below 1 also take.
	BackpressureScale float64

	// StatsInterval bounds how often the relay samples the store's
	// Inspector.Stats for the outbox gauges (MetricPending, MetricDue,
	// MetricParked, MetricLag): a sample is taken when the metrics are
	// collected and the last one is older than StatsInterval, so at most one
	// Stats call per interval (on Postgres one query, on Redis one script
	// per partition), and none while nobody collects the metrics. Default
	// [DefaultStatsInterval]; negative turns the gauges off. Without Inspector there are no
	// such gauges. MetricArchiveOldestAge, from a store that implements
	// [ArchiveJanitor], is sampled the same way.
	StatsInterval time.Duration

	// ArchiveRetention, when positive, makes the relay that holds
	// partition 0's lease (one relay of a fleet at a time, through the
	// lease it already holds: no second lock) remove archived entries sent
	// more than ArchiveRetention ago, every RetentionInterval, in batches
	// of RetentionBatch through the store's [ArchiveJanitor], pausing
	// between batches at least RetentionPause and at least as long as the
	// last batch took, so the janitor takes at most half of one store
	// connection's time and yields to the drain. It stops a round as soon
	// as the relay no longer holds partition 0. The store must implement
	// ArchiveJanitor (NewRelay fails otherwise). Default 0: archived
	// entries are kept until removed by hand (`outbox purge`).
	ArchiveRetention time.Duration

	// ParkedRetention, when positive, also removes entries parked more
	// than ParkedRetention ago, through the store's [ParkedPurger], in the
	// same rounds as ArchiveRetention. A parked entry was never delivered:
	// each removal is logged at WARN with the IDs removed, and the relay
	// logs at start, at WARN, that it will remove them. Default 0: parked
	// entries stay until an operator requeues or cancels them.
	ParkedRetention time.Duration

	// RetentionInterval is how often the relay holding partition 0 runs a
	// retention round ([ArchiveJanitor.MaintainArchive], then the purges of
	// ArchiveRetention and ParkedRetention). Default
	// [DefaultRetentionInterval]. With a store that implements
	// ArchiveJanitor the rounds run even without a retention, so that a
	// partitioned archive gets its partitions ahead of time.
	RetentionInterval time.Duration

	// RetentionBatch is the most rows one purge call removes. Default
	// [DefaultRetentionBatch].
	RetentionBatch int

	// RetentionPause is the least pause between two purge calls of a
	// round. Default [DefaultRetentionPause].
	RetentionPause time.Duration

	// HealthInterval is how often the relay calls the store's
	// [HealthChecker] (when it implements it) for the table and memory
	// metrics and the warnings it logs once. Default
	// [DefaultHealthInterval]; negative turns the checks off.
	HealthInterval time.Duration

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

	// Version is the version of the program that runs the relay, recorded
	// in its heartbeat ([Member].Version, with Host, the machine's host
	// name, and Started, when the relay started) so operators can tell the
	// relays of a fleet apart. Default: the main module's version from the
	// program's build information (runtime/debug.ReadBuildInfo); for a
	// "(devel)" build, "(devel)" followed by the VCS revision (its first 12
	// characters, "+dirty" when the tree was modified) when the build
	// recorded one; "" when the program carries no build information.
	Version string
}

// The defaults of [RelayOptions]: the value each zero field takes. Front
// ends read them for their flags' defaults and help text. RenewMargin and
// AcquireInterval default to a third of LeaseTTL, and Owner to a token made
// from the host name, the process ID and random bytes.
const (
	// DefaultBatchSize is the default of [RelayOptions.BatchSize].
	DefaultBatchSize = 500
	// DefaultMaxInFlight is the default of [RelayOptions.MaxInFlight].
	DefaultMaxInFlight = 500
	// DefaultPollInterval is the default of [RelayOptions.PollInterval].
	DefaultPollInterval = time.Second
	// DefaultLeaseTTL is the default of [RelayOptions.LeaseTTL].
	DefaultLeaseTTL = 30 * time.Second
	// DefaultBreakerThreshold is the default of
	// [RelayOptions.BreakerThreshold].
	DefaultBreakerThreshold = 5
	// DefaultBreakerCooldown is the default of
	// [RelayOptions.BreakerCooldown].
	DefaultBreakerCooldown = 5 * time.Second
	// DefaultBackpressureScale is the default of
	// [RelayOptions.BackpressureScale].
	DefaultBackpressureScale = 4
	// DefaultStatsInterval is the default of [RelayOptions.StatsInterval].
	DefaultStatsInterval = 15 * time.Second
	// DefaultRetentionInterval is the default of
	// [RelayOptions.RetentionInterval].
	DefaultRetentionInterval = time.Minute
	// DefaultRetentionBatch is the default of
	// [RelayOptions.RetentionBatch].
	DefaultRetentionBatch = 1000
	// DefaultRetentionPause is the default of
	// [RelayOptions.RetentionPause].
	DefaultRetentionPause = 50 * time.Millisecond
	// DefaultHealthInterval is the default of
	// [RelayOptions.HealthInterval].
	DefaultHealthInterval = time.Minute
)

// withDefaults returns o with every zero field set to its default. It is
// the one place the defaults are applied; it checks nothing (see
// [RelayOptions.Validate]).
func (o RelayOptions) withDefaults() RelayOptions {
	if o.Owner == "" {
		o.Owner = newOwner()
	}
	if o.BatchSize == 0 {
		o.BatchSize = DefaultBatchSize
	}
	if o.MaxInFlight == 0 {
		o.MaxInFlight = DefaultMaxInFlight
	}
	if o.PollInterval == 0 {
		o.PollInterval = DefaultPollInterval
	}
	if o.LeaseTTL == 0 {
		o.LeaseTTL = DefaultLeaseTTL
	}
	if o.RenewMargin == 0 {
		o.RenewMargin = o.LeaseTTL / 3
	}
	if o.AcquireInterval == 0 {
		o.AcquireInterval = o.LeaseTTL / 3
	}
	if o.BreakerThreshold == 0 {
		o.BreakerThreshold = DefaultBreakerThreshold
	}
	if o.BreakerCooldown == 0 {
		o.BreakerCooldown = DefaultBreakerCooldown
	}
	if o.BackpressureScale < 1 {
		o.BackpressureScale = DefaultBackpressureScale
	}
	if o.StatsInterval == 0 {
		o.StatsInterval = DefaultStatsInterval
	}
	if o.RetentionInterval == 0 {
		o.RetentionInterval = DefaultRetentionInterval
	}
	if o.RetentionBatch == 0 {
		o.RetentionBatch = DefaultRetentionBatch
	}
	if o.RetentionPause == 0 {
		o.RetentionPause = DefaultRetentionPause
	}
	if o.HealthInterval == 0 {
		o.HealthInterval = DefaultHealthInterval
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
	if o.Version == "" {
		o.Version = buildVersion(debug.ReadBuildInfo())
	}
	return o
}

// buildVersion is the default of [RelayOptions.Version] from the build
// information info (ok: ReadBuildInfo found some).
func buildVersion(info *debug.BuildInfo, ok bool) string {
	if !ok || info == nil {
		return ""
	}
	v := info.Main.Version
	if v != "" && v != "(devel)" {
		return v
	}
	var rev string
	dirty := false
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	if rev == "" {
		return v
	}
	if v == "" {
		v = "(devel)"
	}
	v += " " + rev[:min(len(rev), 12)]
	if dirty {
		v += "+dirty"
	}
	return v
}

// newOwner makes the default lease owner token: host name, process ID and
// 8 random bytes.
func newOwner() string {
	host, _ := os.Hostname()
	var b [8]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("%s-%d-%s", host, os.Getpid(), hex.EncodeToString(b[:]))
}

// OptionLandingBound is the name [OptionProblem.Options] uses for the
// sink's landing bound ([LandingBounder]), which takes part in a rule of
// the options without being one of them.
const OptionLandingBound = "LandingBound"

// Validate checks o as [NewRelay] does, with sink (nil when it is not
// known yet: then the rule that involves the sink's landing bound is not
// checked), and reports every problem at once as an [*OptionsError]; nil
// when o is usable. Zero fields count as their defaults. A front end can
// call it before it opens a store and gets the error NewRelay would
// return, except for [RelayOptions.Partitions], which NewRelay also checks
// against the store's partition count, and the retentions, which it checks
// against the store's optional interfaces.
//
// The rules: BatchSize, MaxInFlight, MaxPartitions and RetentionBatch are
// not negative; PollInterval, LeaseTTL, RenewMargin, AcquireInterval,
// BreakerCooldown, ArchiveRetention, ParkedRetention, RetentionInterval
// and RetentionPause are not negative; RenewMargin is below LeaseTTL; with
// a sink that declares a landing bound, LeaseTTL exceeds RenewMargin plus
// that bound; Backoff passes [backoff.Policy.Validate]. NewRelay also
// checks the retentions against the store: ArchiveRetention needs an
// [ArchiveJanitor], ParkedRetention a [ParkedPurger].
func (o RelayOptions) Validate(sink Sink) error {
	landing, _ := landingBound(sink)
	return optionsError(o.problems(landing))
}

// landingBound is the sink's landing bound as the relay uses it (a
// negative, unbounded one counts as 0), and the bound as declared; 0, 0
// when the sink is not a [LandingBounder].
func landingBound(sink Sink) (landing, declared time.Duration) {
	lb, ok := sink.(LandingBounder)
	if !ok {
		return 0, 0
	}
	declared = lb.LandingBound()
	return max(declared, 0), declared
}

// problems lists every problem of o (as given; defaults are applied here)
// with a sink whose landing bound is landing.
func (o RelayOptions) problems(landing time.Duration) []OptionProblem {
	var ps []OptionProblem
	bad := func(format string, args ...any) { ps = append(ps, problem(format, args...)) }
	d := o.withDefaults()
	if d.BatchSize < 0 {
		bad("{BatchSize} is %d; use a positive size or 0 for the default", d.BatchSize)
	}
	if d.MaxInFlight < 0 {
		bad("{MaxInFlight} is %d; use a positive bound or 0 for the default", d.MaxInFlight)
	}
	for _, f := range []struct {
		name string
		d    time.Duration
	}{{"PollInterval", o.PollInterval}, {"LeaseTTL", o.LeaseTTL}, {"RenewMargin", o.RenewMargin}, {"AcquireInterval", o.AcquireInterval}, {"BreakerCooldown", o.BreakerCooldown},
		{"ArchiveRetention", o.ArchiveRetention}, {"ParkedRetention", o.ParkedRetention}, {"RetentionInterval", o.RetentionInterval}, {"RetentionPause", o.RetentionPause}} {
		if f.d < 0 {
			bad("{"+f.name+"} is %v; durations must not be negative", f.d)
		}
	}
	switch {
	case d.RenewMargin >= d.LeaseTTL:
		bad("{RenewMargin} (%v) must be below {LeaseTTL} (%v)", d.RenewMargin, d.LeaseTTL)
	case landing > 0 && d.LeaseTTL <= d.RenewMargin+landing:
		bad("{LeaseTTL} (%v) is too short for {"+OptionLandingBound+"} (%v): the relay stops trusting a lease {RenewMargin} (%v) plus that bound before it ends; raise {LeaseTTL} to %v or more, or lower the sink's timeouts",
			d.LeaseTTL, landing, d.RenewMargin, o.shortestLeaseTTL(landing))
	}
	if d.RetentionBatch < 0 {
		bad("{RetentionBatch} is %d; use a positive size or 0 for the default", d.RetentionBatch)
	}
	if d.MaxPartitions < 0 {
		bad("{MaxPartitions} is %d; use a positive limit or 0 for no limit", d.MaxPartitions)
	}
	if err := d.Backoff.Validate(); err != nil {
		p := problem("{Backoff}")
		p.err = err
		ps = append(ps, p)
	}
	return ps
}

// shortestLeaseTTL is the shortest whole number of seconds LeaseTTL can be
// with a sink whose landing bound is landing: above RenewMargin plus the
// bound, RenewMargin being a third of LeaseTTL where o leaves it 0.
func (o RelayOptions) shortestLeaseTTL(landing time.Duration) time.Duration {
	least := o.RenewMargin + landing
	if o.RenewMargin == 0 {
		least = landing * 3 / 2
	}
	return least.Truncate(time.Second) + time.Second
}

// OptionsError is the error [RelayOptions.Validate] and [NewRelay] return
// for bad options: every problem found, each naming the options involved,
// so a front end can report them with its own names for the options (its
// flags, its config keys) through [OptionsError.Describe]. Find it with
// errors.As.
type OptionsError struct {
	Problems []OptionProblem
}

// OptionProblem is one bad setting, or one rule that a combination of
// settings breaks.
type OptionProblem struct {
	// Options are the options involved: [RelayOptions] field names
	// ("LeaseTTL", "RenewMargin", ...) and [OptionLandingBound] for the
	// sink's landing bound. The first is the one the problem is about.
	Options []string

	text string // the problem, {Name} standing for each of Options
	err  error  // the cause, when another package's check found it
}

// problem makes an OptionProblem from a format whose options are written
// {Name}; args must not hold braces.
func problem(format string, args ...any) OptionProblem {
	text := fmt.Sprintf(format, args...)
	var names []string
	for rest := text; ; {
		i := strings.IndexByte(rest, '{')
		j := strings.IndexByte(rest[i+1:], '}')
		if i < 0 || j < 0 {
			break
		}
		if name := rest[i+1 : i+1+j]; !slices.Contains(names, name) {
			names = append(names, name)
		}
		rest = rest[i+1+j+1:]
	}
	return OptionProblem{Options: names, text: text}
}

// Describe renders the problem with name(option) for each option of
// p.Options; where name returns "", the option keeps its RelayOptions
// name (and [OptionLandingBound] reads "the sink's landing bound").
func (p OptionProblem) Describe(name func(option string) string) string {
	s := p.text
	for _, o := range p.Options {
		n := name(o)
		if n == "" {
			n = defaultOptionName(o)
		}
		s = strings.ReplaceAll(s, "{"+o+"}", n)
	}
	if p.err != nil {
		s += ": " + p.err.Error()
	}
	return s
}

func defaultOptionName(option string) string {
	if option == OptionLandingBound {
		return "the sink's landing bound"
	}
	return option
}

// Error reports every problem on a line of its own, naming the options as
// RelayOptions fields.
func (e *OptionsError) Error() string {
	lines := make([]string, len(e.Problems))
	for i, p := range e.Problems {
		lines[i] = "outbox: RelayOptions." + p.Describe(defaultOptionName)
	}
	return strings.Join(lines, "\n")
}

// Describe reports every problem on a line of its own, as
// [OptionProblem.Describe] renders it with name, without the "outbox:"
// prefix of Error: a front end adds its own.
func (e *OptionsError) Describe(name func(option string) string) string {
	lines := make([]string, len(e.Problems))
	for i, p := range e.Problems {
		lines[i] = p.Describe(name)
	}
	return strings.Join(lines, "\n")
}

// Unwrap returns the causes other packages' checks found (the
// [backoff.Policy] error of Backoff), so errors.Is and errors.As see them.
func (e *OptionsError) Unwrap() []error {
	var errs []error
	for _, p := range e.Problems {
		if p.err != nil {
			errs = append(errs, p.err)
		}
	}
	return errs
}

// optionsError is an *OptionsError of ps, nil without problems.
func optionsError(ps []OptionProblem) error {
	if len(ps) == 0 {
		return nil
	}
	return &OptionsError{Problems: ps}
}
