package inbox

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/metric"
)

// Sentinel errors, checked with errors.Is.
var (
	// ErrInvalidMessage: a message the inbox cannot deduplicate (no ID) or
	// whose fields contradict each other.
	ErrInvalidMessage = errors.New("inbox: invalid message")
	// ErrInvalidArgument: a bad argument or option.
	ErrInvalidArgument = errors.New("inbox: invalid argument")
	// ErrGap: a message's per-key sequence number skipped numbers of its
	// key and the policy ([GapFail], or [GapHold] inside a caller's
	// transaction) refused to apply it. The error is a [*GapError].
	ErrGap = errors.New("inbox: sequence gap")
)

// Message is what the inbox needs of one consumed message.
type Message struct {
	// ID is the outbox entry's ID (the "outbox-id" header, or the broker's
	// message ID the sinks set to it). Required.
	ID string
	// Key is the entry's key; with Seq it drives the per-key order check.
	Key string
	// Seq is the entry's per-key sequence number (header outbox-key-seq,
	// see outbox.ParseKeySeq), 0 when it has none. A Seq without a Key is
	// ignored.
	Seq int64
	// Offset, when set, is stored with the effects: Offset.Next is the
	// offset after this message in its source partition. A batch stores
	// the highest Next of each partition, duplicates included.
	Offset *Offset
	// Data is the caller's: the helpers attach the broker's message (a
	// *kgo.Record, a jetstream.Msg, an amqp091.Delivery) for the handler.
	Data any
}

// Handler applies one message's effects in tx. It runs only for a message
// the inbox has not applied before; it may run more than once for the same
// message when a transaction is retried (a transient conflict, a held
// gap), each time in a new transaction, so it must write its effects only
// through tx. An error rolls the transaction back.
type Handler[Tx any] func(ctx context.Context, tx Tx, m Message) error

// Outcome is what the inbox did with one message.
type Outcome int

const (
	// Applied: the handler ran and its transaction committed.
	Applied Outcome = iota + 1
	// Duplicate: the message's ID was applied before; the handler did
	// not run. Acknowledge the message.
	Duplicate
)

func (o Outcome) String() string {
	switch o {
	case Applied:
		return "applied"
	case Duplicate:
		return "duplicate"
	}
	return fmt.Sprintf("Outcome(%d)", int(o))
}

// Result is the inbox's verdict on one message.
type Result struct {
	Outcome Outcome
	// Gap is set when the message's sequence number skipped numbers of
	// its key (reported as a metric and a log line, then handled by
	// Options.Gaps).
	Gap *Gap
	// Late: the message was applied though its sequence number is at or
	// below the key's highest applied one: it arrived after later
	// entries of its key (an entry parked in the outbox and requeued
	// after them). The key's number stays.
	Late bool
	// First: the key had no applied number (never seen, or removed by
	// the janitor) and the message's number is above 1: there is nothing
	// to compare it with, so no gap is reported.
	First bool
}

// Gap is a run of sequence numbers of one key the consumer did not see:
// From through To, inclusive.
type Gap struct {
	Key      string
	From, To int64
}

// Missing is the number of numbers skipped.
func (g Gap) Missing() int64 { return g.To - g.From + 1 }

// GapError is the error for a gap the policy did not apply (it wraps
// [ErrGap]).
type GapError struct {
	ID  string
	Gap Gap
}

func (e *GapError) Error() string {
	return fmt.Sprintf("inbox: message %q of key %q skips sequence numbers %d..%d (%d missing); set Options.Gaps to GapApply to apply such messages",
		e.ID, e.Gap.Key, e.Gap.From, e.Gap.To, e.Gap.Missing())
}

func (e *GapError) Unwrap() error { return ErrGap }

// GapPolicy says what the inbox does with a message whose sequence number
// skips numbers of its key.
type GapPolicy int

const (
	// GapApply applies it anyway, after reporting the gap (default).
	GapApply GapPolicy = iota
	// GapHold rolls the transaction back and tries it again every
	// Options.GapRetry, for up to Options.GapHold, in case the missing
	// messages are applied meanwhile (by another consumer of the key, or
	// redelivered); after that it applies the message and reports the
	// gap. Inside a caller's transaction ([Inbox.Apply]) it cannot wait
	// and returns a [*GapError] instead.
	GapHold
	// GapFail returns a [*GapError] and applies nothing of the batch.
	GapFail
)

// Options configure an [Inbox]. The zero value is the defaults.
type Options struct {
	// Gaps is the gap policy. Default GapApply.
	Gaps GapPolicy
	// GapHold is how long GapHold waits for the missing numbers. Default
	// 30s.
	GapHold time.Duration
	// GapRetry is how often GapHold tries again. Default 100ms.
	GapRetry time.Duration
	// MaxAttempts is how many times Handle and HandleBatch run a
	// transaction that fails with a retryable conflict
	// (Store.Retryable), with a short jittered backoff between attempts.
	// Default 10; 1 disables retries.
	MaxAttempts int
	// Logger receives gap reports and retries. Default slog.Default().
	Logger *slog.Logger
	// MeterProvider provides the metrics instruments (see MetricMessages).
	// Default the global otel.GetMeterProvider().
	MeterProvider metric.MeterProvider
}

const (
	defaultGapHold     = 30 * time.Second
	defaultGapRetry    = 100 * time.Millisecond
	defaultMaxAttempts = 10
)

func (o *Options) setDefaults() error {
	if o.Gaps < GapApply || o.Gaps > GapFail {
		return fmt.Errorf("inbox: Options.Gaps %d is not a GapPolicy; use GapApply, GapHold or GapFail: %w", int(o.Gaps), ErrInvalidArgument)
	}
	if o.GapHold < 0 || o.GapRetry < 0 || o.MaxAttempts < 0 {
		return fmt.Errorf("inbox: Options.GapHold, GapRetry and MaxAttempts must not be negative: %w", ErrInvalidArgument)
	}
	if o.GapHold == 0 {
		o.GapHold = defaultGapHold
	}
	if o.GapRetry == 0 {
		o.GapRetry = defaultGapRetry
	}
	if o.MaxAttempts == 0 {
		o.MaxAttempts = defaultMaxAttempts
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.MeterProvider == nil {
		o.MeterProvider = otel.GetMeterProvider()
	}
	return nil
}

// Inbox applies each consumed message's effects once: it records the
// message's ID in the consumer's own transaction, next to the effects, and
// skips a message whose ID a committed transaction recorded. It is safe
// for concurrent use.
type Inbox[Tx any] struct {
	store    Store[Tx]
	recorder KeyRecorder[Tx] // the store's, or nil
	finisher Finisher[Tx]    // the store's, or nil
	opts     Options
	m        *metrics
}

// New returns an Inbox over store.
func New[Tx any](store Store[Tx], opts Options) (*Inbox[Tx], error) {
	if store == nil {
		return nil, fmt.Errorf("inbox: New needs a Store: %w", ErrInvalidArgument)
	}
	if err := opts.setDefaults(); err != nil {
		return nil, err
	}
	m, err := newMetrics(opts.MeterProvider)
	if err != nil {
		return nil, fmt.Errorf("inbox: metrics: %w", err)
	}
	ib := &Inbox[Tx]{store: store, opts: opts, m: m}
	ib.recorder, _ = store.(KeyRecorder[Tx])
	ib.finisher, _ = store.(Finisher[Tx])
	return ib, nil
}

// Store returns the inbox's store.
func (ib *Inbox[Tx]) Store() Store[Tx] { return ib.store }

// Handle applies one message in a transaction of its own: see HandleBatch.
func (ib *Inbox[Tx]) Handle(ctx context.Context, m Message, h Handler[Tx]) (Result, error) {
	rs, err := ib.HandleBatch(ctx, []Message{m}, h)
	if err != nil {
		return Result{}, err
	}
	return rs[0], nil
}

// HandleBatch applies msgs in one transaction of the store: it records
// their IDs, calls h for each message not applied before (in order), sets
// the keys' sequence numbers and stores the messages' offsets, and
// commits. It returns one Result per message, in order, once the
// transaction committed; on an error nothing of the batch is applied and
// the messages must not be acknowledged. A transaction failing with a
// retryable conflict is run again, up to Options.MaxAttempts times.
// Messages of one key must be in their order in msgs. No msgs returns
// (nil, nil).
func (ib *Inbox[Tx]) HandleBatch(ctx context.Context, msgs []Message, h Handler[Tx]) ([]Result, error) {
	if len(msgs) == 0 {
		return nil, nil
	}
	if err := validate(msgs, h); err != nil {
		return nil, err
	}
	var (
		results   []Result
		heldSince time.Time
		force     bool
	)
	for attempt := 1; ; attempt++ {
		start := time.Now()
		err := ib.store.InTx(ctx, func(ctx context.Context, tx Tx) error {
			var err error
			results, err = ib.apply(ctx, tx, msgs, h, force)
			return err
		})
		ib.m.txDone(ctx, time.Since(start), err == nil, errors.Is(err, errHeld) || (err != nil && attempt < ib.opts.MaxAttempts && ib.store.Retryable(err)))
		if err == nil {
			ib.report(ctx, msgs, results)
			return results, nil
		}
		if errors.Is(err, errHeld) {
			if heldSince.IsZero() {
				heldSince = time.Now()
			}
			if time.Since(heldSince) >= ib.opts.GapHold {
				ib.opts.Logger.WarnContext(ctx, "inbox: held a message for its key's missing sequence numbers for the whole Options.GapHold; applying it", "hold", ib.opts.GapHold)
				force = true
				attempt--
				continue
			}
			if err := sleep(ctx, ib.opts.GapRetry); err != nil {
				return nil, err
			}
			attempt--
			continue
		}
		if attempt >= ib.opts.MaxAttempts || !ib.store.Retryable(err) {
			return nil, err
		}
		ib.opts.Logger.DebugContext(ctx, "inbox: transaction conflict, running it again", "attempt", attempt, "err", err)
		if err := sleep(ctx, backoff(attempt)); err != nil {
			return nil, err
		}
	}
}

// Apply applies msgs inside the caller's transaction tx, which the caller
// commits: it records their IDs, calls h for each message not applied
// before, sets the keys' sequence numbers and stores the offsets. The
// Results hold only once tx commits; if it rolls back, nothing was
// applied. Apply does not retry, and under GapHold it returns a
// [*GapError] instead of waiting. Metrics count the results when Apply
// returns. No msgs returns (nil, nil).
//
// Apply called twice in one transaction sees the IDs the first call
// recorded (a message in both is a Duplicate the second time), but
// whether it sees the key numbers the first call set depends on the store
// (Store.KeySeqs reads them as committed; a SQL store also sees its own
// transaction's): pass a key's messages to one call, in order.
func (ib *Inbox[Tx]) Apply(ctx context.Context, tx Tx, msgs []Message, h Handler[Tx]) ([]Result, error) {
	if len(msgs) == 0 {
		return nil, nil
	}
	if err := validate(msgs, h); err != nil {
		return nil, err
	}
	results, err := ib.apply(ctx, tx, msgs, h, false)
	if errors.Is(err, errHeld) {
		return nil, heldGapError(msgs, results)
	}
	if err != nil {
		return nil, err
	}
	ib.report(ctx, msgs, results)
	return results, nil
}

// errHeld rolls back a transaction GapHold holds.
var errHeld = errors.New("inbox: held for missing sequence numbers")

func validate[Tx any](msgs []Message, h Handler[Tx]) error {
	if h == nil {
		return fmt.Errorf("inbox: a Handler is required: %w", ErrInvalidArgument)
	}
	for i, m := range msgs {
		if m.ID == "" {
			return fmt.Errorf("inbox: message %d has no ID, so it cannot be deduplicated; set Message.ID to the outbox entry's ID (header outbox-id): %w", i, ErrInvalidMessage)
		}
		if m.Seq < 0 {
			return fmt.Errorf("inbox: message %q has a negative sequence number %d: %w", m.ID, m.Seq, ErrInvalidMessage)
		}
		if m.Offset != nil && (m.Offset.Topic == "" || m.Offset.Next < 0) {
			return fmt.Errorf("inbox: message %q has an Offset without a topic or with a negative Next: %w", m.ID, ErrInvalidMessage)
		}
	}
	return nil
}

// apply is one attempt of a batch in tx. With force, held gaps are applied.
func (ib *Inbox[Tx]) apply(ctx context.Context, tx Tx, msgs []Message, h Handler[Tx], force bool) ([]Result, error) {
	fresh, last, err := ib.record(ctx, tx, msgs)
	if err != nil {
		return nil, err
	}
	results := make([]Result, len(msgs))
	set := map[string]int64{}
	held := false
	for i, m := range msgs {
		if !fresh[i] {
			results[i] = Result{Outcome: Duplicate}
			continue
		}
		r := Result{Outcome: Applied}
		if m.Seq > 0 && m.Key != "" {
			r = ib.checkSeq(m, last, set)
			if r.Gap != nil && !force && ib.opts.Gaps != GapApply {
				results[i] = r
				held = true
				break
			}
		}
		if err := h(ctx, tx, m); err != nil {
			return nil, fmt.Errorf("inbox: handler of message %q: %w", m.ID, err)
		}
		results[i] = r
	}
	if held {
		if ib.opts.Gaps == GapFail {
			return nil, heldGapError(msgs, results)
		}
		return results, errHeld
	}
	if err := ib.finish(ctx, tx, set, offsets(msgs)); err != nil {
		return nil, err
	}
	return results, nil
}

// record records the IDs of msgs and reads the numbers of their keys: in
// one round trip with a KeyRecorder store and numbered messages, else
// Record and, for the new numbered messages' keys if any, KeySeqs.
func (ib *Inbox[Tx]) record(ctx context.Context, tx Tx, msgs []Message) (fresh []bool, last map[string]int64, err error) {
	ids := make([]string, len(msgs))
	for i, m := range msgs {
		ids[i] = m.ID
	}
	read := false // the keys' numbers were read with the IDs
	if keys := seqKeys(msgs, nil); ib.recorder != nil && len(keys) > 0 {
		fresh, last, err = ib.recorder.RecordWithKeySeqs(ctx, tx, ids, keys)
		read = true
	} else {
		fresh, err = ib.store.Record(ctx, tx, ids)
	}
	if err != nil {
		return nil, nil, err
	}
	if len(fresh) != len(ids) {
		return nil, nil, fmt.Errorf("inbox: Store.Record returned %d answers for %d IDs", len(fresh), len(ids))
	}
	if keys := seqKeys(msgs, fresh); !read && len(keys) > 0 { // no round trip for a batch without numbered keys
		if last, err = ib.store.KeySeqs(ctx, tx, keys); err != nil {
			return nil, nil, err
		}
	}
	return fresh, last, nil
}

// finish writes the batch's key numbers and offsets: in one round trip
// with a Finisher store, else one for each that is not empty.
func (ib *Inbox[Tx]) finish(ctx context.Context, tx Tx, seqs map[string]int64, offs []Offset) error {
	switch {
	case len(seqs) == 0 && len(offs) == 0:
		return nil
	case ib.finisher != nil:
		return ib.finisher.Finish(ctx, tx, seqs, offs)
	}
	if len(seqs) > 0 {
		if err := ib.store.SetKeySeqs(ctx, tx, seqs); err != nil {
			return err
		}
	}
	if len(offs) > 0 {
		return ib.store.SaveOffsets(ctx, tx, offs)
	}
	return nil
}

// checkSeq compares m's number with its key's last applied one (last, as
// committed, then set, as applied earlier in this batch) and records the
// new last number in set.
func (ib *Inbox[Tx]) checkSeq(m Message, last, set map[string]int64) Result {
	r := Result{Outcome: Applied}
	l, ok := set[m.Key]
	if !ok {
		l, ok = last[m.Key]
	}
	switch {
	case !ok && m.Seq > 1:
		r.First = true
	case ok && m.Seq <= l:
		r.Late = true
		return r
	case m.Seq > l+1 && ok:
		r.Gap = &Gap{Key: m.Key, From: l + 1, To: m.Seq - 1}
	}
	set[m.Key] = m.Seq
	return r
}

func heldGapError(msgs []Message, results []Result) error {
	for i, r := range results {
		if r.Gap != nil {
			return &GapError{ID: msgs[i].ID, Gap: *r.Gap}
		}
	}
	return ErrGap
}

// seqKeys are the keys of the numbered messages, once each: of the fresh
// ones only, unless fresh is nil.
func seqKeys(msgs []Message, fresh []bool) []string {
	var keys []string
	seen := map[string]bool{}
	for i, m := range msgs {
		if (fresh == nil || fresh[i]) && m.Seq > 0 && m.Key != "" && !seen[m.Key] {
			seen[m.Key] = true
			keys = append(keys, m.Key)
		}
	}
	return keys
}

// offsets is the highest Next of each source partition in msgs.
func offsets(msgs []Message) []Offset {
	type part struct {
		group, topic string
		partition    int32
	}
	idx := map[part]int{}
	var out []Offset
	for _, m := range msgs {
		if m.Offset == nil {
			continue
		}
		p := part{m.Offset.Group, m.Offset.Topic, m.Offset.Partition}
		if i, ok := idx[p]; ok {
			out[i].Next = max(out[i].Next, m.Offset.Next)
			continue
		}
		idx[p] = len(out)
		out = append(out, *m.Offset)
	}
	return out
}

// report logs the gaps of a committed batch and counts its results.
func (ib *Inbox[Tx]) report(ctx context.Context, msgs []Message, results []Result) {
	for i, r := range results {
		ib.m.result(ctx, r)
		if r.Gap != nil {
			ib.opts.Logger.WarnContext(ctx, "inbox: sequence gap: the consumer did not see these numbers of the key before this message",
				"id", msgs[i].ID, "key", r.Gap.Key, "missing_from", r.Gap.From, "missing_to", r.Gap.To, "missing", r.Gap.Missing())
		}
	}
}

// backoff is the pause before attempt+1: 5ms doubling, at most 500ms,
// with full jitter in its upper half.
func backoff(attempt int) time.Duration {
	d := 5 * time.Millisecond << min(attempt-1, 7)
	d = min(d, 500*time.Millisecond)
	return d/2 + rand.N(d/2+1)
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
