package amqpinbox

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/outboxrelay/outbox/inbox"
)

// Defaults of [Options].
const (
	// DefaultMaxBatch is the default of Options.MaxBatch: one message per
	// transaction.
	DefaultMaxBatch = 1
	// DefaultPrefetch is the least default of Options.Prefetch.
	DefaultPrefetch = 16
	// DefaultRetryDelay is the default of Options.RetryDelay.
	DefaultRetryDelay = time.Second
	// DefaultAttempts is the default of Options.Attempts.
	DefaultAttempts = 3
)

// ErrCancelled is returned (wrapped) by [Consumer.Run] when the broker
// cancelled the consumer while its channel stayed open: the queue was
// deleted, or (a quorum or stream queue) its leader went away.
var ErrCancelled = errors.New("amqpinbox: the broker cancelled the consumer")

// Options configure a [Consumer]. The zero value is the defaults.
type Options struct {
	// MaxBatch is the most deliveries handled in one transaction (one
	// inbox.HandleBatch): Run takes the first delivery it is given and,
	// without waiting, the ones already delivered behind it, up to
	// MaxBatch, then acknowledges them with one basic.ack (multiple). A
	// larger batch pays one commit for many messages; a handler error
	// fails the whole batch. Default [DefaultMaxBatch] (1).
	MaxBatch int

	// Prefetch is the channel's prefetch count (basic.qos): how many
	// unacknowledged deliveries the broker sends ahead. It must be at
	// least MaxBatch. Default max(2 x MaxBatch, [DefaultPrefetch]).
	Prefetch int

	// Attempts is how many times Run runs a batch's transaction while it
	// fails, RetryDelay apart, holding the deliveries, before it returns
	// them (and every other unacknowledged delivery) to the queue. Trying
	// in place keeps a key's order on any queue; returning to the queue
	// keeps it only where the queue puts a returned message back at its
	// place (see the package documentation, "Errors"). 1 returns them
	// after the first failure. Default [DefaultAttempts] (3).
	Attempts int

	// RetryDelay is how long Run waits between two attempts of a failed
	// batch, and after it returned the deliveries to the queue before it
	// consumes again. Default [DefaultRetryDelay] (1s).
	RetryDelay time.Duration

	// IDHeader is the header read for the entry's ID when a delivery has
	// no message_id (amqpsink's Options.IDHeader). Default
	// [DefaultIDHeader] ("outbox-id").
	IDHeader string

	// Key gives a delivery's outbox Key, which with its "outbox-key-seq"
	// header drives the inbox's per-key order check. Default: the routing
	// key, which is the Key with amqpsink's default routing. With
	// another routing (RoutingKeyTemplate "{topic}.{key}"), return the
	// Key part: a key's numbers are one sequence across topics.
	Key func(amqp.Delivery) string

	// ConsumerTag is the prefix of the consumer tags Run uses (it adds
	// "-1", "-2", ... for each time it consumes). Default "amqpinbox-"
	// and a random suffix.
	ConsumerTag string

	// Retention, when positive, makes Run run the inbox's janitor
	// (inbox.Inbox.RunJanitor, with JanitorOptions.Retention set to
	// Retention and Interval to JanitorInterval) for as long as it runs,
	// stopped before Run returns. A queue gives no consumer ownership of
	// anything, so every Consumer with Retention runs one: the store's
	// Purge skips rows another transaction holds, so concurrent janitors
	// never wait on each other and never remove a record twice. See
	// inbox.JanitorOptions.Retention for how long to keep records (for
	// RabbitMQ, at least your longest outage: a queue keeps a message
	// until it is acknowledged). Default 0: no janitor (run
	// inbox.RunJanitor yourself).
	Retention time.Duration

	// JanitorInterval is the wait between two rounds of the janitor
	// Retention turns on. Default (0) inbox.JanitorOptions' default, 1
	// minute.
	JanitorInterval time.Duration

	// Logger receives the failed batches (Warn) and the rejected
	// deliveries (Error). Default slog.Default().
	Logger *slog.Logger
}

func (o *Options) setDefaults() error {
	if o.MaxBatch < 0 || o.Prefetch < 0 || o.Attempts < 0 || o.RetryDelay < 0 {
		return fmt.Errorf("amqpinbox: Options.MaxBatch (%d), Prefetch (%d), Attempts (%d) and RetryDelay (%v) must not be negative; leave them 0 for the defaults: %w", o.MaxBatch, o.Prefetch, o.Attempts, o.RetryDelay, inbox.ErrInvalidArgument)
	}
	if o.Retention < 0 || o.JanitorInterval < 0 {
		return fmt.Errorf("amqpinbox: Options.Retention (%v) and JanitorInterval (%v) must not be negative (0 turns the janitor off, and is the default interval): %w", o.Retention, o.JanitorInterval, inbox.ErrInvalidArgument)
	}
	if o.Attempts == 0 {
		o.Attempts = DefaultAttempts
	}
	if o.MaxBatch == 0 {
		o.MaxBatch = DefaultMaxBatch
	}
	if o.Prefetch == 0 {
		o.Prefetch = max(2*o.MaxBatch, DefaultPrefetch)
	}
	if o.Prefetch < o.MaxBatch {
		return fmt.Errorf("amqpinbox: Options.Prefetch %d is below Options.MaxBatch %d, so a batch could never fill; raise Prefetch or leave it 0: %w", o.Prefetch, o.MaxBatch, inbox.ErrInvalidArgument)
	}
	if o.RetryDelay == 0 {
		o.RetryDelay = DefaultRetryDelay
	}
	if o.IDHeader == "" {
		o.IDHeader = DefaultIDHeader
	}
	if o.Key == nil {
		o.Key = routingKey
	}
	if o.ConsumerTag == "" {
		o.ConsumerTag = "amqpinbox-" + rand.Text()[:12]
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return nil
}

// Consumer consumes a RabbitMQ queue and applies each delivery through an
// inbox, acknowledging it only after the transaction that applied it (or
// found it a duplicate) committed. It owns its channel: Run sets the
// channel's prefetch and acknowledges with multiple=true, which would
// also acknowledge another consumer's deliveries on the same channel. Its
// Run is meant to run once at a time.
type Consumer[Tx any] struct {
	ib    *inbox.Inbox[Tx]
	h     inbox.Handler[Tx]
	ch    *amqp.Channel
	queue string
	opts  Options
}

// NewConsumer returns a Consumer handling the deliveries of queue on ch
// with h through ib. ch must be a channel of its own, not in confirm or
// transaction mode for anything else, on a connection without amqp091's
// automatic recovery (Run does not follow a recovered channel: the caller
// reconnects). The handler gets the delivery as m.Data.(amqp.Delivery)
// and must not acknowledge it.
func NewConsumer[Tx any](ib *inbox.Inbox[Tx], h inbox.Handler[Tx], ch *amqp.Channel, queue string, opts Options) (*Consumer[Tx], error) {
	if ib == nil || h == nil || ch == nil {
		return nil, fmt.Errorf("amqpinbox: NewConsumer needs an inbox, a handler and a channel: %w", inbox.ErrInvalidArgument)
	}
	if err := opts.setDefaults(); err != nil {
		return nil, err
	}
	return &Consumer[Tx]{ib: ib, h: h, ch: ch, queue: queue, opts: opts}, nil
}

// errBatchFailed: a batch's transaction failed; every unacknowledged
// delivery goes back to the queue.
var errBatchFailed = errors.New("amqpinbox: batch failed")

// Run consumes the queue (manual acknowledgements, prefetch
// Options.Prefetch) and handles its deliveries, a batch at a time, until
// ctx is done (it then returns nil) or the channel closes, the broker
// cancels the consumer or an acknowledgement cannot be sent (it returns
// an error, wrapping ErrCancelled for a cancel). After an error, open a
// new channel (and connection, if that closed) and call Run again with a
// new Consumer: what was not acknowledged went back to the queue when
// the channel closed, and what of it committed is skipped as a duplicate.
//
// For each batch: a delivery Message cannot read (no ID, or a sequence
// header that is not a sequence number) is rejected (basic.nack, requeue
// false: dead-lettered if the queue has a dead-letter exchange, else
// dropped) and logged; the others go through one inbox.HandleBatch, after
// which they are acknowledged with one basic.ack (multiple, up to the
// batch's last delivery tag), duplicates included. When HandleBatch
// fails, Run tries it again, up to Options.Attempts times in all,
// Options.RetryDelay apart; when it still fails, Run cancels its
// consumer, returns every unacknowledged delivery to the queue
// (basic.nack, multiple, requeue), waits RetryDelay and consumes again;
// see the package documentation ("Errors"). When ctx ends, it does the
// same without the wait and returns. With Options.Retention, the inbox's
// janitor runs beside, from after basic.qos until Run returns.
func (c *Consumer[Tx]) Run(ctx context.Context) error {
	if err := c.ch.Qos(c.opts.Prefetch, 0, false); err != nil {
		return fmt.Errorf("amqpinbox: set the channel's prefetch (basic.qos %d): %w", c.opts.Prefetch, err)
	}
	defer c.runJanitor(ctx)()
	closes := c.ch.NotifyClose(make(chan *amqp.Error, 1))
	for n := 1; ; n++ {
		tag := fmt.Sprintf("%s-%d", c.opts.ConsumerTag, n)
		deliveries, err := c.ch.Consume(c.queue, tag, false, false, false, false, nil)
		if err != nil {
			return fmt.Errorf("amqpinbox: consume from queue %q: %w", c.queue, err)
		}
		err = c.consume(ctx, deliveries, closes)
		if err != nil && !errors.Is(err, errBatchFailed) {
			return err
		}
		if rerr := c.requeueAll(tag, deliveries); rerr != nil {
			if ctx.Err() != nil {
				return nil
			}
			return rerr
		}
		if err == nil || sleep(ctx, c.opts.RetryDelay) != nil {
			return nil // ctx is done
		}
	}
}

// consume handles deliveries until ctx is done (nil), a batch fails
// (errBatchFailed) or the consumer ends (an error).
func (c *Consumer[Tx]) consume(ctx context.Context, deliveries <-chan amqp.Delivery, closes <-chan *amqp.Error) error {
	for {
		batch, err := c.next(ctx, deliveries, closes)
		if err != nil || batch == nil {
			return err
		}
		if err := c.handle(ctx, batch); err != nil {
			return err
		}
		if ctx.Err() != nil {
			return nil
		}
	}
}

// next waits for a delivery, then takes the ones already delivered behind
// it up to MaxBatch. It returns nil, nil when ctx is done first.
func (c *Consumer[Tx]) next(ctx context.Context, deliveries <-chan amqp.Delivery, closes <-chan *amqp.Error) ([]amqp.Delivery, error) {
	var batch []amqp.Delivery
	select {
	case <-ctx.Done():
		return nil, nil
	case d, ok := <-deliveries:
		if !ok {
			return nil, c.ended(closes)
		}
		batch = append(batch, d)
	}
	for len(batch) < c.opts.MaxBatch {
		select {
		case d, ok := <-deliveries:
			if !ok {
				return nil, c.ended(closes)
			}
			batch = append(batch, d)
		default:
			return batch, nil
		}
	}
	return batch, nil
}

// ended is the error of a delivery channel that closed: the channel
// closed, or the broker cancelled the consumer.
func (c *Consumer[Tx]) ended(closes <-chan *amqp.Error) error {
	if !c.ch.IsClosed() {
		return fmt.Errorf("amqpinbox: consumer of queue %q: %w (was the queue deleted?); call Run again once the queue is back", c.queue, ErrCancelled)
	}
	var reason error = amqp.ErrClosed
	select {
	case e, ok := <-closes:
		if ok && e != nil {
			reason = e
		}
	default:
	}
	return fmt.Errorf("amqpinbox: the channel consuming queue %q closed: %w; open a new channel (on a new connection if that closed too) and call Run again: the unacknowledged deliveries went back to the queue, and those whose transaction committed are skipped as duplicates", c.queue, reason)
}

// handle applies batch through the inbox and acknowledges it.
func (c *Consumer[Tx]) handle(ctx context.Context, batch []amqp.Delivery) error {
	msgs := make([]inbox.Message, 0, len(batch))
	var last uint64
	for _, d := range batch {
		m, err := message(d, c.opts.IDHeader, c.opts.Key)
		if err != nil {
			c.opts.Logger.ErrorContext(ctx, "amqpinbox: rejecting a delivery the inbox cannot handle (dead-lettered if the queue has a dead-letter exchange, else dropped)", "queue", c.queue, "err", err)
			if err := c.ch.Nack(d.DeliveryTag, false, false); err != nil {
				return fmt.Errorf("amqpinbox: reject a delivery the inbox cannot handle: %w", err)
			}
			continue
		}
		msgs = append(msgs, m)
		last = d.DeliveryTag
	}
	if len(msgs) == 0 {
		return nil
	}
	if err := c.apply(ctx, msgs); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		c.opts.Logger.WarnContext(ctx, "amqpinbox: handling a batch failed; returning the unacknowledged deliveries to the queue", "queue", c.queue, "ids", ids(msgs), "attempts", c.opts.Attempts, "retry_delay", c.opts.RetryDelay, "err", err)
		return errBatchFailed
	}
	if err := c.ch.Ack(last, true); err != nil {
		return fmt.Errorf("amqpinbox: acknowledge %d deliveries after their transaction committed: %w; open a new channel (on a new connection if that closed too) and call Run again: the deliveries go back to the queue when this channel closes and are skipped as duplicates", len(msgs), err)
	}
	return nil
}

// apply runs the batch's transaction, up to Options.Attempts times,
// RetryDelay apart, while it fails.
func (c *Consumer[Tx]) apply(ctx context.Context, msgs []inbox.Message) error {
	for attempt := 1; ; attempt++ {
		_, err := c.ib.HandleBatch(ctx, msgs, c.h)
		if err == nil || ctx.Err() != nil || attempt >= c.opts.Attempts {
			return err
		}
		c.opts.Logger.WarnContext(ctx, "amqpinbox: handling a batch failed; trying it again in place", "queue", c.queue, "ids", ids(msgs), "attempt", attempt, "retry_delay", c.opts.RetryDelay, "err", err)
		if err := sleep(ctx, c.opts.RetryDelay); err != nil {
			return err
		}
	}
}

func ids(msgs []inbox.Message) []string {
	out := make([]string, len(msgs))
	for i, m := range msgs {
		out[i] = m.ID
	}
	return out
}

// requeueAll stops the consumer tag and returns every unacknowledged
// delivery of the channel to the queue, where RabbitMQ puts each back at
// its place. The deliveries still buffered are dropped: they are among
// the returned ones.
func (c *Consumer[Tx]) requeueAll(tag string, deliveries <-chan amqp.Delivery) error {
	if err := c.ch.Cancel(tag, false); err != nil {
		return fmt.Errorf("amqpinbox: cancel consumer %q after a failed batch: %w; open a new channel and call Run again", tag, err)
	}
	if err := c.ch.Nack(0, true, true); err != nil {
		return fmt.Errorf("amqpinbox: return the unacknowledged deliveries to queue %q: %w; open a new channel and call Run again (closing this one returns them)", c.queue, err)
	}
	for range deliveries {
	}
	return nil
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// runJanitor starts the inbox's janitor when Options.Retention is set and
// returns the function that stops it and waits for it.
func (c *Consumer[Tx]) runJanitor(ctx context.Context) (stop func()) {
	if c.opts.Retention == 0 {
		return func() {}
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		err := c.ib.RunJanitor(ctx, inbox.JanitorOptions{Retention: c.opts.Retention, Interval: c.opts.JanitorInterval, Logger: c.opts.Logger})
		if err != nil {
			c.opts.Logger.Error("amqpinbox: the inbox janitor did not start", "err", err)
		}
	}()
	return func() {
		cancel()
		<-done
	}
}
