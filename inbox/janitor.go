package inbox

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/metric"
)

// JanitorOptions configure [RunJanitor] and [PurgeOnce].
type JanitorOptions struct {
	// Retention is how long a record is kept: records of IDs applied, and
	// key sequence numbers last set, longer ago than Retention are
	// removed. Required. It must be longer than the longest time a
	// message can be redelivered after it was applied: the broker's
	// retention (Kafka's default log.retention.hours is 7 days) when a
	// consumer can rewind to the start of a topic, and at least the
	// outbox's own duplicate window (a relay's lease TTL plus its
	// retries). A duplicate that arrives after its record was removed is
	// applied again, and a key whose number was removed cannot report a
	// gap at its next message (Result.First).
	Retention time.Duration
	// BatchSize is the most records one Store.Purge call (one
	// transaction) removes. Default 1000.
	BatchSize int
	// Pause is the least wait between two batches of a round. The wait is
	// also at least as long as the last batch took, so the janitor uses at
	// most half of one store connection's time however slow the store is
	// (the outbox relay's retention paces itself the same way). Default
	// 50ms.
	Pause time.Duration
	// Interval is the wait between two rounds of RunJanitor. Default 1m.
	Interval time.Duration
	// Logger receives a line per round that removed something, and
	// errors. Default slog.Default().
	Logger *slog.Logger
	// MeterProvider provides the MetricPurged counter and, for a store
	// that implements [OldestReporter], the MetricOldestAge gauge. Default
	// the global otel.GetMeterProvider().
	MeterProvider metric.MeterProvider
}

func (o *JanitorOptions) setDefaults() error {
	if o.Retention <= 0 {
		return fmt.Errorf("inbox: JanitorOptions.Retention is required: set it longer than your broker's retention (Kafka's default is 7 days) and the outbox's duplicate window: %w", ErrInvalidArgument)
	}
	if o.BatchSize < 0 || o.Pause < 0 || o.Interval < 0 {
		return fmt.Errorf("inbox: JanitorOptions.BatchSize, Pause and Interval must not be negative: %w", ErrInvalidArgument)
	}
	if o.BatchSize == 0 {
		o.BatchSize = 1000
	}
	if o.Pause == 0 {
		o.Pause = 50 * time.Millisecond
	}
	if o.Interval == 0 {
		o.Interval = time.Minute
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.MeterProvider == nil {
		o.MeterProvider = otel.GetMeterProvider()
	}
	return nil
}

// PurgeOnce runs one round of the janitor: it removes the records older
// than opts.Retention in batches of opts.BatchSize (each Store.Purge call
// a transaction of its own, never a handler's), pausing opts.Pause between
// batches and at least as long as the last batch took, until a batch
// removes less than a full batch of both kinds. It returns how many IDs
// and keys it removed.
func PurgeOnce[Tx any](ctx context.Context, store Store[Tx], opts JanitorOptions) (ids, keys int, err error) {
	if err := opts.setDefaults(); err != nil {
		return 0, 0, err
	}
	m, err := newMetrics(opts.MeterProvider)
	if err != nil {
		return 0, 0, err
	}
	return purgeRound(ctx, store, opts, m)
}

func purgeRound[Tx any](ctx context.Context, store Store[Tx], opts JanitorOptions, m *metrics) (ids, keys int, err error) {
	before := time.Now().Add(-opts.Retention)
	for {
		start := time.Now()
		i, k, err := store.Purge(ctx, before, opts.BatchSize)
		took := time.Since(start)
		ids += i
		keys += k
		m.purgedRecords(ctx, i, k)
		if err != nil {
			if ctx.Err() != nil && errors.Is(err, ctx.Err()) {
				return ids, keys, err // context errors pass through unwrapped
			}
			return ids, keys, fmt.Errorf("inbox: purge: %w", err)
		}
		if i < opts.BatchSize && k < opts.BatchSize {
			return ids, keys, nil
		}
		if err := sleep(ctx, max(opts.Pause, took)); err != nil {
			return ids, keys, err
		}
	}
}

// RunJanitor removes old inbox records until ctx is done: a round
// ([PurgeOnce]) at once, then one every opts.Interval. Run it in the
// consumer's process (one per inbox is enough; more do no harm, as Purge
// skips rows another transaction holds: concurrent janitors never wait on
// each other and never remove a record twice). A failed round is logged
// and tried again at the next interval. When store implements
// [OldestReporter], RunJanitor calls Oldest once after each round and
// exports its answer as the MetricOldestAge gauge until it returns (a
// failed Oldest is logged and leaves the gauge absent until the next
// round). It returns nil when ctx is done, or an error for bad options.
func RunJanitor[Tx any](ctx context.Context, store Store[Tx], opts JanitorOptions) error {
	if err := opts.setDefaults(); err != nil {
		return err
	}
	m, err := newMetrics(opts.MeterProvider)
	if err != nil {
		return err
	}
	oldest, err := newOldestGauge(opts.MeterProvider, store)
	if err != nil {
		return err
	}
	defer oldest.close()
	for {
		ids, keys, err := purgeRound(ctx, store, opts, m)
		if ctx.Err() == nil {
			oldest.read(ctx, opts.Logger)
		}
		switch {
		case ctx.Err() != nil:
			return nil
		case err != nil && !errors.Is(err, context.Canceled):
			opts.Logger.ErrorContext(ctx, "inbox: janitor round failed; trying again at the next interval", "err", err, "removed_ids", ids, "removed_keys", keys)
		case ids+keys > 0:
			opts.Logger.InfoContext(ctx, "inbox: janitor removed old records", "ids", ids, "keys", keys, "retention", opts.Retention)
		}
		if sleep(ctx, opts.Interval) != nil {
			return nil
		}
	}
}

// RunJanitor runs [RunJanitor] over the inbox's store, with the inbox's
// Options.Logger and Options.MeterProvider where opts leaves Logger and
// MeterProvider nil. The consumer helpers (kafkainbox, natsinbox,
// amqpinbox) call it when their Retention option is set.
func (ib *Inbox[Tx]) RunJanitor(ctx context.Context, opts JanitorOptions) error {
	if opts.Logger == nil {
		opts.Logger = ib.opts.Logger
	}
	if opts.MeterProvider == nil {
		opts.MeterProvider = ib.opts.MeterProvider
	}
	return RunJanitor(ctx, ib.store, opts)
}
