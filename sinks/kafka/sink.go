package kafkasink

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outboxrelay/outbox"
	"github.com/outboxrelay/outbox/backoff"
)

// DefaultIDHeader is the record header that carries the entry ID unless
// [Options.IDHeader] names another.
const DefaultIDHeader = "outbox-id"

// Options configures a [Sink]. The zero value is usable: every zero field
// takes its documented default.
type Options struct {
	// Topic maps an entry to the topic its record is produced to.
	// Default: the entry's Topic, or DefaultTopic when that is empty. An
	// entry that maps to "" fails permanently.
	Topic func(outbox.Entry) string

	// DefaultTopic is the topic of entries whose Topic is empty (the
	// default Topic mapping only). Default "": such entries fail
	// permanently. Entries appended through a backend always have a topic
	// (outbox.PrepareEntries requires one), so this matters only for a
	// custom Topic mapping that falls back to it.
	DefaultTopic string

	// IDHeader is the record header that carries the entry ID, for
	// consumers to deduplicate by. Default [DefaultIDHeader] ("outbox-id").
	// An entry header of the same name is dropped.
	IDHeader string

	// AttemptHeader, when set, names a record header that carries the
	// delivery attempt number in decimal: 1 for the first attempt, 2 for
	// the first retry, and so on. Default "": no attempt header.
	AttemptHeader string

	// PublishTimeout bounds one Publish call: records not acknowledged by
	// then fail with a semi-transient error (the brokers are unreachable,
	// slow, or the partition has no leader). A record already sent to a
	// broker cannot be failed until the broker answers or the connection
	// times out (the idempotent producer must know whether it was
	// written), so Publish may take up to kgo's request timeout longer.
	// Default 30s; negative means only ctx bounds Publish.
	PublishTimeout time.Duration

	// Classify decides the class of a produce error. Default [Classify].
	// Wrap it to change one case, for example to treat an unknown topic
	// as transient while topics are created by hand.
	Classify func(error) backoff.Class

	// TransactionalIDPrefix turns on transactional publishing (only with
	// [Dial]): each Publish call is one Kafka transaction of a producer
	// whose transactional ID is TransactionalIDPrefix followed by the
	// outbox partition number, so the relay that takes a partition over
	// fences the previous holder at the broker. Default "": no
	// transactions. See the package documentation and docs/kafka.md.
	TransactionalIDPrefix string
}

func (o Options) withDefaults() Options {
	if o.IDHeader == "" {
		o.IDHeader = DefaultIDHeader
	}
	if o.PublishTimeout == 0 {
		o.PublishTimeout = 30 * time.Second
	}
	if o.Classify == nil {
		o.Classify = Classify
	}
	if o.Topic == nil {
		def := o.DefaultTopic
		o.Topic = func(e outbox.Entry) string {
			if e.Topic != "" {
				return e.Topic
			}
			return def
		}
	}
	return o
}

// Sink publishes outbox entries to Kafka. It implements [outbox.Sink] and
// is safe for concurrent use.
type Sink struct {
	client *kgo.Client // nil in transactional mode
	owned  bool        // Close closes client(s)
	opts   Options
	conn   *connWatch // last connection error; nil for a caller's client

	txn  *txnClients // transactional mode only
	solo soloProducer
}

var _ outbox.Sink = (*Sink)(nil)

// New returns a sink that produces through client. The client stays the
// caller's: Close does not close it, and the caller may produce through
// it too.
//
// The client must keep kgo's idempotent producer on (the default): it is
// what keeps a partition's records in order and free of duplicates across
// kgo's internal retries. New rejects a client built with
// kgo.DisableIdempotentWrite, kgo.ManualFlushing (Publish never flushes)
// or kgo.TransactionalID (every record outside a transaction would fail;
// use [Dial] with [Options.TransactionalIDPrefix] instead).
//
// kgo's defaults retry retriable errors without limit, so a retriable
// broker error surfaces only as PublishTimeout's semi-transient error.
// Set kgo.RecordRetries (as [Dial] does) to see them as transient errors
// sooner.
func New(client *kgo.Client, opts Options) (*Sink, error) {
	if client == nil {
		return nil, errors.New("kafkasink: New needs a non-nil *kgo.Client")
	}
	if opts.TransactionalIDPrefix != "" {
		return nil, errors.New("kafkasink: Options.TransactionalIDPrefix needs one client per partition; use Dial instead of New")
	}
	if err := checkClient(client, false); err != nil {
		return nil, err
	}
	return &Sink{client: client, opts: opts.withDefaults()}, nil
}

func checkClient(client *kgo.Client, transactional bool) error {
	if v, _ := client.OptValue(kgo.DisableIdempotentWrite).(bool); v {
		return errors.New("kafkasink: the client disables idempotent writes; drop kgo.DisableIdempotentWrite, the sink relies on the idempotent producer for per-key order")
	}
	if v, _ := client.OptValue(kgo.ManualFlushing).(bool); v {
		return errors.New("kafkasink: the client uses kgo.ManualFlushing; drop it, Publish relies on kgo flushing records itself")
	}
	if vs := client.OptValues(kgo.TransactionalID); !transactional && len(vs) == 2 && vs[1] == true {
		return errors.New("kafkasink: the client has a kgo.TransactionalID; drop it, or use Dial with Options.TransactionalIDPrefix for transactional publishing")
	}
	return nil
}

// Dial returns a sink with its own client, built from seed brokers (host:port)
// and kopts. Close closes the client.
//
// The client gets these defaults before kopts (so kopts override them):
// kgo.RecordRetries(10), so retriable broker errors come back as transient
// errors instead of being retried until PublishTimeout, and
// kgo.RecordDeliveryTimeout(PublishTimeout) when PublishTimeout is
// positive. A connection hook remembers the last failed connection, so a
// publish that times out says why.
//
// With [Options.TransactionalIDPrefix] set, Dial builds one client per
// outbox partition on first use, each with kgo.TransactionalID(prefix +
// partition); kopts must not set a TransactionalID of their own.
func Dial(seeds []string, opts Options, kopts ...kgo.Opt) (*Sink, error) {
	if len(seeds) == 0 {
		return nil, errors.New("kafkasink: Dial needs at least one seed broker (host:port)")
	}
	opts = opts.withDefaults()
	conn := &connWatch{}
	base := []kgo.Opt{
		kgo.SeedBrokers(seeds...),
		kgo.RecordRetries(10),
		kgo.WithHooks(conn),
	}
	if opts.PublishTimeout > 0 {
		base = append(base, kgo.RecordDeliveryTimeout(opts.PublishTimeout))
	}
	all := append(base, kopts...)
	if opts.TransactionalIDPrefix != "" {
		s := &Sink{owned: true, opts: opts, conn: conn}
		s.txn = &txnClients{opts: all, clients: map[int]*txnClient{}}
		// Build one client now to report bad options at once.
		probe, err := kgo.NewClient(all...)
		if err != nil {
			return nil, fmt.Errorf("kafkasink: bad client options: %w", err)
		}
		err = checkClient(probe, false)
		probe.Close()
		if err != nil {
			return nil, err
		}
		return s, nil
	}
	client, err := kgo.NewClient(all...)
	if err != nil {
		return nil, fmt.Errorf("kafkasink: bad client options: %w", err)
	}
	if err := checkClient(client, false); err != nil {
		client.Close()
		return nil, err
	}
	return &Sink{client: client, owned: true, opts: opts, conn: conn}, nil
}

// Client returns the sink's client: the one given to [New], or the one
// [Dial] built. It is nil for a transactional sink, which has one client
// per partition.
func (s *Sink) Client() *kgo.Client { return s.client }

// Close closes the clients [Dial] built (a client given to [New] stays
// open), and the client the sink built to retry oversize records alone. Publish must not be called after Close. Close is
// idempotent.
func (s *Sink) Close() error {
	s.solo.close()
	if !s.owned {
		return nil
	}
	if s.client != nil {
		s.client.Close()
	}
	if s.txn != nil {
		s.txn.closeAll()
	}
	return nil
}

// Publish implements [outbox.Sink]: it produces every entry of msgs
// concurrently, waits for each to be acknowledged or to fail, and returns
// one error per entry, nil for acknowledged ones. Each error is marked with
// its [backoff.Class] (see [Classify]); context errors of ctx itself come
// back as they are. Publish does not retain msgs or their payloads.
func (s *Sink) Publish(ctx context.Context, msgs []outbox.Entry) []error {
	errs := make([]error, len(msgs))
	if len(msgs) == 0 {
		return errs
	}
	pctx, cancel := ctx, context.CancelFunc(func() {})
	if s.opts.PublishTimeout > 0 {
		pctx, cancel = context.WithTimeout(ctx, s.opts.PublishTimeout)
	}
	defer cancel()
	if s.txn != nil {
		s.publishTxn(ctx, pctx, msgs, errs)
		return errs
	}
	recs := make([]*kgo.Record, len(msgs))
	for i := range msgs {
		recs[i], errs[i] = s.record(&msgs[i])
	}
	s.produceAll(pctx, s.client, recs, errs)
	s.isolateTooLarge(pctx, s.client, recs, errs)
	for i := range errs {
		errs[i] = s.finish(ctx, &msgs[i], errs[i])
	}
	return errs
}

// inFlightGrace is how long Publish still waits for records kgo holds in
// flight after its context (or PublishTimeout) ended, before it gives up
// on them.
const inFlightGrace = 5 * time.Second

// produceAll produces every non-nil record whose errs slot is nil through
// client and stores each outcome in errs.
//
// kgo cannot fail a record of the idempotent producer that was written to
// a broker which never answered (it cannot know whether the broker wrote
// it), so a dead broker can hold a promise back for a long time. When ctx
// ends, produceAll waits inFlightGrace more, then reports the records
// still unanswered as failed with ctx's error and returns: they may still
// be written later, which is a duplicate, never a loss.
func (s *Sink) produceAll(ctx context.Context, client *kgo.Client, recs []*kgo.Record, errs []error) {
	var (
		mu        sync.Mutex
		pending   = 1 // the loop below holds one until it is done
		done      = make(chan struct{})
		abandoned bool
		answered  = make([]bool, len(recs))
	)
	release := func() {
		if pending--; pending == 0 {
			close(done)
		}
	}
	for i, rec := range recs {
		if rec == nil || errs[i] != nil {
			answered[i] = true
			continue
		}
		mu.Lock()
		pending++
		mu.Unlock()
		client.Produce(ctx, rec, func(_ *kgo.Record, err error) {
			mu.Lock()
			defer mu.Unlock()
			if abandoned {
				return
			}
			errs[i], answered[i] = err, true
			release()
		})
	}
	mu.Lock()
	release()
	mu.Unlock()
	select {
	case <-done:
		return
	case <-ctx.Done():
	}
	timer := time.NewTimer(inFlightGrace)
	defer timer.Stop()
	select {
	case <-done:
		return
	case <-timer.C:
	}
	mu.Lock()
	defer mu.Unlock()
	abandoned = true
	for i := range recs {
		if !answered[i] {
			errs[i] = fmt.Errorf("kafkasink: record still in flight %v after the deadline, no broker answered (it may yet be written, as a duplicate): %w", inFlightGrace, ctx.Err())
		}
	}
}

// isolateTooLarge produces again, one at a time, the records that failed
// as too large: a broker rejects a whole Kafka batch when it is over its
// limit, so the records that shared the batch with an oversize one failed
// with it. They go through a separate client (built once from client's
// options) that produces one record at a time, so each is alone in its
// batch for certain: the main client may be batching the records of other
// Publish calls with it. A record that fails alone is too large by itself.
func (s *Sink) isolateTooLarge(ctx context.Context, client *kgo.Client, recs []*kgo.Record, errs []error) {
	for i, err := range errs {
		if recs[i] == nil || !tooLarge(err) || ctx.Err() != nil {
			continue
		}
		r := recs[i]
		errs[i] = s.solo.produce(ctx, client, &kgo.Record{Topic: r.Topic, Key: r.Key, Value: r.Value, Headers: r.Headers})
	}
}

// soloProducer produces one record at a time through a client of its own.
type soloProducer struct {
	mu     sync.Mutex
	client *kgo.Client
	err    error
}

func (p *soloProducer) produce(ctx context.Context, like *kgo.Client, rec *kgo.Record) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.client == nil && p.err == nil {
		p.client, p.err = kgo.NewClient(like.Opts()...)
	}
	if p.err != nil {
		return fmt.Errorf("kafkasink: build the client that retries oversize records alone: %w", p.err)
	}
	return p.client.ProduceSync(ctx, rec).FirstErr()
}

func (p *soloProducer) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.client != nil {
		p.client.Close()
		p.client = nil
	}
}

func tooLarge(err error) bool {
	return errors.Is(err, kerr.MessageTooLarge) || errors.Is(err, kerr.RecordListTooLarge)
}

// record builds the record of e, or returns the permanent error of an
// entry that cannot become a record.
func (s *Sink) record(e *outbox.Entry) (*kgo.Record, error) {
	topic := s.opts.Topic(*e)
	if topic == "" {
		return nil, backoff.Permanent(fmt.Errorf("kafkasink: entry %s has no topic; set Entry.Topic, Options.DefaultTopic or Options.Topic", e.ID))
	}
	rec := &kgo.Record{Topic: topic, Value: e.Payload}
	if e.Key != "" {
		rec.Key = []byte(e.Key)
	}
	n := 1 + len(e.Headers)
	if s.opts.AttemptHeader != "" {
		n++
	}
	rec.Headers = make([]kgo.RecordHeader, 0, n)
	rec.Headers = append(rec.Headers, kgo.RecordHeader{Key: s.opts.IDHeader, Value: []byte(e.ID)})
	if s.opts.AttemptHeader != "" {
		rec.Headers = append(rec.Headers, kgo.RecordHeader{Key: s.opts.AttemptHeader, Value: strconv.AppendInt(nil, int64(e.Attempts)+1, 10)})
	}
	for _, k := range slices.Sorted(maps.Keys(e.Headers)) {
		if k == s.opts.IDHeader || k == s.opts.AttemptHeader {
			continue
		}
		rec.Headers = append(rec.Headers, kgo.RecordHeader{Key: k, Value: []byte(e.Headers[k])})
	}
	return rec, nil
}

// finish turns a produce outcome into the error Publish returns for e.
func (s *Sink) finish(ctx context.Context, e *outbox.Entry, err error) error {
	if err == nil {
		return nil
	}
	var c backoff.Classifier
	if errors.As(err, &c) {
		return err // built by the sink, already classified
	}
	if ctxErr := ctx.Err(); ctxErr != nil && (errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)) {
		return ctxErr // the caller's context ended: pass it through
	}
	if errors.Is(err, context.DeadlineExceeded) {
		// Our PublishTimeout, not the caller's deadline.
		err = fmt.Errorf("kafkasink: entry %s not acknowledged within PublishTimeout %v (brokers unreachable or slow, or the partition has no leader%s): %w",
			e.ID, s.opts.PublishTimeout, s.conn.last(), err)
		return backoff.SemiTransient(err)
	}
	class := s.opts.Classify(err)
	err = fmt.Errorf("kafkasink: publish entry %s: %w%s", e.ID, err, hint(err, class, s.conn))
	return backoff.Mark(err, class)
}
