package natsinbox

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/outboxrelay/outbox/inbox"
)

// Defaults of [Options].
const (
	// DefaultMaxBatch is the default of Options.MaxBatch: one message per
	// transaction.
	DefaultMaxBatch = 1
	// DefaultNakDelay is the default of Options.NakDelay.
	DefaultNakDelay = time.Second
	// DefaultAttempts is the default of Options.Attempts.
	DefaultAttempts = 3
)

// Options configure a [Consumer]. The zero value is the defaults.
type Options struct {
	// MaxBatch is the most messages handled in one transaction (one
	// inbox.HandleBatch): Run takes the first message it is given and,
	// without waiting, the ones already pulled behind it, up to MaxBatch.
	// A larger batch pays one commit for many messages; a handler error
	// fails the whole batch (every message of it is redelivered). Default
	// [DefaultMaxBatch] (1). Run keeps up to max(2 x MaxBatch, 16)
	// messages pulled ahead of the one it handles, and their AckWait runs
	// meanwhile: set the consumer's AckWait well above the time that many
	// transactions take, or they are redelivered (and then skipped as
	// duplicates, at a cost).
	MaxBatch int

	// Attempts is how many times Run runs a batch's transaction while it
	// fails (a handler error, a store error the inbox does not retry, a
	// gap under GapFail), NakDelay apart, holding the messages (it tells
	// JetStream it is still working on them, InProgress, so their
	// AckWait starts again), before it Naks them. Trying in place keeps a
	// key's order whatever the consumer's MaxAckPending; a Nak'd message
	// comes back after the ones delivered meanwhile. 1 Naks after the
	// first failure. Default [DefaultAttempts] (3).
	Attempts int

	// NakDelay is the pause between two attempts of a failed batch, and
	// the delay of the Nak each of its messages gets after the last
	// attempt: JetStream redelivers it after that long. Default
	// [DefaultNakDelay] (1s). The consumer's MaxDeliver bounds the
	// redeliveries (see the package documentation, "Errors").
	NakDelay time.Duration

	// IDHeader is the header that carries the outbox entry's ID (natssink's
	// Options.IDHeader). When a message lacks it, Nats-Msg-Id is read.
	// Default [DefaultIDHeader] ("outbox-id").
	IDHeader string

	// KeyHeader is the header that carries the entry's Key (natssink's
	// Options.KeyHeader). Default [DefaultKeyHeader] ("outbox-key").
	KeyHeader string

	// Retention, when positive, makes Run run the inbox's janitor
	// (inbox.Inbox.RunJanitor, with JanitorOptions.Retention set to
	// Retention and Interval to JanitorInterval) for as long as it runs,
	// stopped before Run returns. JetStream gives no consumer ownership of
	// anything, so every Consumer with Retention runs one: the store's
	// Purge skips rows another transaction holds, so concurrent janitors
	// never wait on each other and never remove a record twice. See
	// inbox.JanitorOptions.Retention for how long to keep records (at
	// least the stream's MaxAge when it can be replayed). Default 0: no
	// janitor (run inbox.RunJanitor yourself).
	Retention time.Duration

	// JanitorInterval is the wait between two rounds of the janitor
	// Retention turns on. Default (0) inbox.JanitorOptions' default, 1
	// minute.
	JanitorInterval time.Duration

	// Logger receives the failed batches (Warn) and the terminated
	// messages (Error). Default slog.Default().
	Logger *slog.Logger
}

func (o *Options) setDefaults() error {
	if o.MaxBatch < 0 || o.Attempts < 0 || o.NakDelay < 0 {
		return fmt.Errorf("natsinbox: Options.MaxBatch (%d), Attempts (%d) and NakDelay (%v) must not be negative; leave them 0 for the defaults: %w", o.MaxBatch, o.Attempts, o.NakDelay, inbox.ErrInvalidArgument)
	}
	if o.Retention < 0 || o.JanitorInterval < 0 {
		return fmt.Errorf("natsinbox: Options.Retention (%v) and JanitorInterval (%v) must not be negative (0 turns the janitor off, and is the default interval): %w", o.Retention, o.JanitorInterval, inbox.ErrInvalidArgument)
	}
	if o.Attempts == 0 {
		o.Attempts = DefaultAttempts
	}
	if o.MaxBatch == 0 {
		o.MaxBatch = DefaultMaxBatch
	}
	if o.NakDelay == 0 {
		o.NakDelay = DefaultNakDelay
	}
	if o.IDHeader == "" {
		o.IDHeader = DefaultIDHeader
	}
	if o.KeyHeader == "" {
		o.KeyHeader = DefaultKeyHeader
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return nil
}

// Consumer reads a JetStream pull consumer's messages and applies each
// through an inbox, acknowledging a message only after the transaction
// that applied it (or found it a duplicate) committed. Its Run is meant
// to run once at a time; run several Consumers (on one or more
// connections) for parallelism.
type Consumer[Tx any] struct {
	ib   *inbox.Inbox[Tx]
	h    inbox.Handler[Tx]
	cons jetstream.Consumer
	opts Options
}

// NewConsumer returns a Consumer handling cons's messages with h through
// ib. cons must be a pull consumer with AckPolicy AckExplicitPolicy (the
// inbox acknowledges each message after its own transaction; AckAll would
// acknowledge messages of other batches or other consumers, AckNone none
// at all): another ack policy is refused with an error wrapping
// inbox.ErrInvalidArgument. The handler gets the message as
// m.Data.(jetstream.Msg) and must not acknowledge it.
func NewConsumer[Tx any](ib *inbox.Inbox[Tx], h inbox.Handler[Tx], cons jetstream.Consumer, opts Options) (*Consumer[Tx], error) {
	if ib == nil || h == nil || cons == nil {
		return nil, fmt.Errorf("natsinbox: NewConsumer needs an inbox, a handler and a JetStream consumer: %w", inbox.ErrInvalidArgument)
	}
	if err := opts.setDefaults(); err != nil {
		return nil, err
	}
	info := cons.CachedInfo()
	if info == nil {
		return nil, fmt.Errorf("natsinbox: the JetStream consumer has no cached info; get it with jetstream's Consumer, CreateConsumer or CreateOrUpdateConsumer: %w", inbox.ErrInvalidArgument)
	}
	if p := info.Config.AckPolicy; p != jetstream.AckExplicitPolicy {
		return nil, fmt.Errorf("natsinbox: consumer %q of stream %q has ack policy %s; the inbox acknowledges each message after its transaction commits and needs AckExplicitPolicy: set ConsumerConfig.AckPolicy to jetstream.AckExplicitPolicy: %w",
			info.Name, info.Stream, p, inbox.ErrInvalidArgument)
	}
	return &Consumer[Tx]{ib: ib, h: h, cons: cons, opts: opts}, nil
}

// pulled is one message or the error that ended the pulling.
type pulled struct {
	msg jetstream.Msg
	err error
}

// Run pulls messages and handles them, a batch at a time, until ctx is
// done (it then returns nil) or the pulling or an acknowledgement fails
// (it returns the error; call Run again, on a new connection if the
// connection closed: what was not acknowledged is redelivered after
// AckWait and skipped as a duplicate if its transaction committed).
//
// For each batch: a message Message cannot read (no ID, or a sequence
// header that is not a sequence number) is terminated
// (Term; never redelivered) and logged with the reason; the others go
// through one inbox.HandleBatch, after which each is acknowledged (Ack),
// duplicates included. When HandleBatch fails, Run tries it again, up to
// Options.Attempts times in all, Options.NakDelay apart; when it still
// fails, each message of the batch is Nak'd with NakDelay and Run goes on
// with the next batch.
// When ctx ends, the messages pulled and not handled are Nak'd without a
// delay, for another consumer to take at once. With Options.Retention,
// the inbox's janitor runs beside, from the start of pulling until Run
// returns.
func (c *Consumer[Tx]) Run(ctx context.Context) error {
	it, err := c.cons.Messages(jetstream.PullMaxMessages(max(2*c.opts.MaxBatch, 16)))
	if err != nil {
		return fmt.Errorf("natsinbox: start pulling: %w", err)
	}
	defer c.runJanitor(ctx)()
	pulls := make(chan pulled, c.opts.MaxBatch)
	stop := make(chan struct{})
	done := make(chan struct{})
	go pump(it, pulls, stop, done)
	defer func() {
		close(stop)
		it.Drain()
		<-done
		nakAll(pulls)
	}()
	for {
		batch, err := c.next(ctx, pulls)
		if err != nil {
			return err
		}
		if batch == nil {
			return nil // ctx is done
		}
		if err := c.handle(ctx, batch); err != nil {
			return err
		}
		if ctx.Err() != nil {
			return nil
		}
	}
}

// pump moves the iterator's messages to pulls until it fails or stop
// closes; its last send is the error that ended it. Once stop is closed it Naks (no
// delay) what the drained iterator still gives, for another consumer to
// take at once. It closes done when it returns.
func pump(it jetstream.MessagesContext, pulls chan<- pulled, stop <-chan struct{}, done chan<- struct{}) {
	defer close(done)
	stopped := false
	for {
		msg, err := it.Next()
		if !stopped {
			select {
			case pulls <- pulled{msg, err}:
				if err != nil {
					return
				}
				continue
			case <-stop:
				stopped = true
			}
		}
		if err != nil {
			return
		}
		_ = msg.Nak()
	}
}

// next waits for a message, then takes the ones already pulled behind it
// up to MaxBatch. It returns nil, nil when ctx is done first.
func (c *Consumer[Tx]) next(ctx context.Context, pulls chan pulled) ([]jetstream.Msg, error) {
	var p pulled
	select {
	case <-ctx.Done():
		return nil, nil
	case p = <-pulls:
	}
	if p.err != nil {
		return nil, fmt.Errorf("natsinbox: pulling messages failed; call Run again (on a new connection if it closed): %w", p.err)
	}
	batch := []jetstream.Msg{p.msg}
	for len(batch) < c.opts.MaxBatch {
		select {
		case p = <-pulls:
		default:
			return batch, nil
		}
		if p.err != nil {
			// Handle what came before the error, which the next
			// call returns: pulls has room (this receive made it)
			// and pump sends nothing after an error.
			pulls <- p
			return batch, nil
		}
		batch = append(batch, p.msg)
	}
	return batch, nil
}

// handle applies batch through the inbox and acknowledges it.
func (c *Consumer[Tx]) handle(ctx context.Context, batch []jetstream.Msg) error {
	msgs := make([]inbox.Message, 0, len(batch))
	kept := batch[:0:0]
	for _, msg := range batch {
		m, err := message(msg, c.opts.IDHeader, c.opts.KeyHeader)
		if err != nil {
			c.opts.Logger.ErrorContext(ctx, "natsinbox: terminating a message the inbox cannot handle; JetStream will not redeliver it", "subject", msg.Subject(), "err", err)
			// Term, not TermWithReason: a server before 2.10 does not
			// understand "+TERM <reason>" and keeps the message.
			if err := msg.Term(); err != nil {
				return fmt.Errorf("natsinbox: terminate a message the inbox cannot handle: %w", err)
			}
			continue
		}
		msgs = append(msgs, m)
		kept = append(kept, msg)
	}
	if len(msgs) == 0 {
		return nil
	}
	if err := c.apply(ctx, kept, msgs); err != nil {
		return c.failed(ctx, kept, msgs, err)
	}
	for i, msg := range kept {
		if err := msg.Ack(); err != nil {
			return fmt.Errorf("natsinbox: acknowledge message %q after its transaction committed: %w; it will be redelivered after AckWait and skipped as a duplicate", msgs[i].ID, err)
		}
	}
	return nil
}

// apply runs the batch's transaction, up to Options.Attempts times,
// NakDelay apart, while it fails, telling JetStream before each new
// attempt that the messages are still being worked on.
func (c *Consumer[Tx]) apply(ctx context.Context, batch []jetstream.Msg, msgs []inbox.Message) error {
	for attempt := 1; ; attempt++ {
		_, err := c.ib.HandleBatch(ctx, msgs, c.h)
		if err == nil || ctx.Err() != nil || attempt >= c.opts.Attempts {
			return err
		}
		c.opts.Logger.WarnContext(ctx, "natsinbox: handling a batch failed; trying it again in place", "ids", ids(msgs), "attempt", attempt, "nak_delay", c.opts.NakDelay, "err", err)
		if err := sleep(ctx, c.opts.NakDelay); err != nil {
			return err
		}
		for _, msg := range batch {
			if perr := msg.InProgress(); perr != nil {
				return fmt.Errorf("natsinbox: tell JetStream a failed batch is being tried again: %w (the batch failed with: %w)", perr, err)
			}
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

// failed Naks the messages of a batch whose transaction failed: with
// NakDelay, or at once when ctx is done (Run is stopping).
func (c *Consumer[Tx]) failed(ctx context.Context, batch []jetstream.Msg, msgs []inbox.Message, err error) error {
	delay := c.opts.NakDelay
	if ctx.Err() != nil {
		delay = 0
	} else {
		c.opts.Logger.WarnContext(ctx, "natsinbox: handling a batch failed; its messages are redelivered after the Nak delay", "ids", ids(msgs), "attempts", c.opts.Attempts, "nak_delay", delay, "err", err)
	}
	for i, msg := range batch {
		var nerr error
		if delay > 0 {
			nerr = msg.NakWithDelay(delay)
		} else {
			nerr = msg.Nak()
		}
		if nerr != nil && !errors.Is(nerr, jetstream.ErrMsgAlreadyAckd) {
			return fmt.Errorf("natsinbox: Nak message %q after its transaction failed (%v): %w; it will be redelivered after AckWait", msgs[i].ID, err, nerr)
		}
	}
	return nil
}

// nakAll Naks, without a delay, the messages left in pulls when Run stops.
func nakAll(pulls <-chan pulled) {
	for {
		select {
		case p := <-pulls:
			if p.msg != nil {
				_ = p.msg.Nak()
			}
		default:
			return
		}
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
			c.opts.Logger.Error("natsinbox: the inbox janitor did not start", "err", err)
		}
	}()
	return func() {
		cancel()
		<-done
	}
}
