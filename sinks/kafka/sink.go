package kafkasink

import (
	"bytes"
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

// Defaults that bound how long a record can still land after Publish
// returned (see Sink.LandingBound): with them, a sink Dial builds reports
// 5s + 3s + 2s = 10s, which fits the relay's default LeaseTTL (30s) less
// its RenewMargin (10s).
const (
	defaultPublishTimeout = 5 * time.Second
	// kgo.ProduceRequestTimeout (kgo: 10s): how long a broker may take to
	// answer a produce request, waiting for the in-sync replicas.
	dialProduceRequestTimeout = 3 * time.Second
	// kgo.RequestTimeoutOverhead (kgo: 10s): what kgo allows on top of a
	// request's own timeout before it drops the connection as dead, and
	// all it allows requests without one (metadata, for one).
	dialRequestTimeoutOverhead = 2 * time.Second
	// kgo.MetadataMinAge (kgo: 5s): after a retriable produce error kgo
	// holds the partition's records until it has refreshed metadata, and
	// it refreshes at most once per MetadataMinAge, so with kgo's default
	// each such error cost up to 5s (and, PublishTimeout being 5s too, a
	// timed-out Publish). 100ms is the Java producer's retry.backoff.ms.
	dialMetadataMinAge = 100 * time.Millisecond
	// kgo.RecordRetries (kgo: unlimited): with dialMetadataMinAge, about
	// 3s of retries, so kgo rides out a leader election of that long
	// before the relay sees a transient error, and still hands the error
	// back before PublishTimeout (5s).
	dialRecordRetries = 30
	// kgo.ProducerLinger (kgo: 10ms): Publish hands kgo a whole round and
	// waits for every record of it, so lingering only delays each round;
	// records produced while a request is in flight are batched anyway.
	// Measured with BenchmarkRelayDrainLinger (2,000 entries into kfake,
	// docs/kafka.md "Hot keys"): one key 236-269k/s at 0, 156-181k/s at
	// 1ms, 70-73k/s at 5ms, 38-41k/s at 10ms; distinct keys 264-273k/s,
	// 215-265k/s, 110-117k/s, 72-83k/s.
	dialProducerLinger = 0
)

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

	// PublishTimeout bounds one Publish call: Publish returns when it
	// passes, if ctx has not ended first, and the records not
	// acknowledged by then fail with a semi-transient error (the brokers
	// are unreachable or slow, or the partition has no leader). Such a
	// record may still be written later, as a duplicate: see
	// [Sink.LandingBound]. Default 5s; negative means only ctx bounds
	// Publish. With [Dial] it is also kgo's RecordDeliveryTimeout, and so
	// part of the landing bound.
	PublishTimeout time.Duration

	// Classify decides the class of a produce error. Default [Classify].
	// Wrap it to change one case, for example to park the entries of an
	// unknown topic at once (return backoff.ClassPermanent for
	// kerr.UnknownTopicOrPartition).
	Classify func(error) backoff.Class

	// UnknownTopicTimeout is how long a topic may stay unknown to the
	// brokers (UNKNOWN_TOPIC_OR_PARTITION, UNKNOWN_TOPIC_ID,
	// INCONSISTENT_TOPIC_ID: a topic not created yet, or being created
	// or created again) before its entries park. Until then such an
	// entry fails with the class Classify gives the error (transient by
	// default), so the relay retries it with backoff and holds back the
	// later entries of its key; from then on it fails permanently, with a
	// reason that names the topic. The time runs from the first publish
	// that found the topic unknown since a record of it was last
	// acknowledged, as this sink saw it (a new sink, or a relay
	// restarted, starts again). Default [DefaultUnknownTopicTimeout]
	// (1m); negative: never parked for it (the relay's attempt limit
	// still parks). A Classify that returns permanent for the error parks
	// at once.
	UnknownTopicTimeout time.Duration

	// Now is the sink's clock, read for UnknownTopicTimeout. Default
	// time.Now; tests inject a fake one.
	Now func() time.Time

	// TransactionalIDPrefix turns on transactional publishing (only with
	// [Dial]): each Publish call is one Kafka transaction of a producer
	// whose transactional ID is TransactionalIDPrefix followed by the
	// outbox partition number, so the relay that takes a partition over
	// fences the previous holder at the broker. Default "": no
	// transactions. See the package documentation and docs/kafka.md.
	TransactionalIDPrefix string

	// LandingBound declares how long after Publish returns a record it
	// handed to the client can still be written, and is what
	// [Sink.LandingBound] then reports instead of the bound it computes
	// from the client's options. Declare it when something the sink
	// cannot see bounds it: typically topics whose
	// message.timestamp.before.max.ms makes the brokers reject records
	// older than that (declare it plus the clock skew between relays and
	// brokers; see docs/kafka.md, "Lease boundary and stale records").
	// Default 0: computed. Negative values are rejected.
	LandingBound time.Duration
}

func (o Options) validate() error {
	if o.LandingBound < 0 {
		return fmt.Errorf("kafkasink: Options.LandingBound is %v; declare a positive bound, or leave it 0 to have it computed", o.LandingBound)
	}
	return nil
}

func (o Options) withDefaults() Options {
	if o.IDHeader == "" {
		o.IDHeader = DefaultIDHeader
	}
	if o.PublishTimeout == 0 {
		o.PublishTimeout = defaultPublishTimeout
	}
	if o.Classify == nil {
		o.Classify = Classify
	}
	if o.UnknownTopicTimeout == 0 {
		o.UnknownTopicTimeout = DefaultUnknownTopicTimeout
	}
	if o.Now == nil {
		o.Now = time.Now
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
	client  *kgo.Client // nil in transactional mode
	owned   bool        // Close closes client(s)
	opts    Options
	conn    *connWatch    // last connection error; nil for a caller's client
	landing time.Duration // what LandingBound reports

	txn    *txnClients // transactional mode only
	solo   soloProducer
	topics topicWatch // topics found unknown, for UnknownTopicTimeout
}

var _ outbox.Sink = (*Sink)(nil)

// LandingUnbounded is what [Sink.LandingBound] reports when nothing bounds
// how long after Publish returns a record can still be written. It is
// negative.
const LandingUnbounded time.Duration = -1

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
// sooner. kgo retries such a record only after a metadata refresh, at most
// one per kgo.MetadataMinAge (default 5s): with the default, every
// retriable broker error holds the partition's records for up to 5s, as
// long as the default PublishTimeout. Set kgo.MetadataMinAge(100ms), as
// Dial does. kgo's default ProducerLinger (10ms) delays every publish
// round by that much; Dial sets 0. With kgo's defaults, a record Publish gave up on can still be
// written any time later ([Sink.LandingBound] is [LandingUnbounded]);
// kgo.AllowIdempotentProduceCancellation and kgo.RecordDeliveryTimeout
// bound it, as Dial sets them. Unlike Dial's, a caller's client is not
// purged of a topic that was deleted and created again: kgo fails such a
// topic with UNKNOWN_TOPIC_ID until the caller calls
// Client.PurgeTopicsFromProducing for it.
func New(client *kgo.Client, opts Options) (*Sink, error) {
	if client == nil {
		return nil, errors.New("kafkasink: New needs a non-nil *kgo.Client")
	}
	if opts.TransactionalIDPrefix != "" {
		return nil, errors.New("kafkasink: Options.TransactionalIDPrefix needs one client per partition; use Dial instead of New")
	}
	if err := opts.validate(); err != nil {
		return nil, err
	}
	if err := checkClient(client, false); err != nil {
		return nil, err
	}
	s := &Sink{client: client, opts: opts.withDefaults()}
	s.landing = s.landingBound(client)
	return s, nil
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
//
//   - kgo.RecordRetries(30), so retriable broker errors come back as
//     transient errors instead of being retried until PublishTimeout
//     (with the next option, 30 retries take about 3s);
//   - kgo.MetadataMinAge(100ms) (kgo's default is 5s): kgo retries a
//     record that failed with a retriable error (NOT_ENOUGH_REPLICAS,
//     NOT_LEADER_FOR_PARTITION, ...) only after a metadata refresh, and
//     refreshes at most once per MetadataMinAge, so this is what one such
//     error delays a partition's records by;
//   - kgo.ProducerLinger(0) (kgo's default is 10ms): Publish produces a
//     whole round at once and waits for all of it, so a linger only delays
//     every round; with several entries of a key per round (see
//     [Sink.KeepsKeyOrder]) a hot key drains about 6x faster than at 10ms
//     (docs/kafka.md, "Hot keys");
//   - kgo.RecordDeliveryTimeout(PublishTimeout) when PublishTimeout is
//     positive;
//   - unless transactional (kgo does not allow it there),
//     kgo.AllowIdempotentProduceCancellation, so kgo stops sending a
//     record once the Publish that produced it has returned, instead of
//     re-sending a request that may have been written until a broker
//     answers. The idempotent producer stays on: per-partition order and
//     no duplicates across kgo's own retries. What kgo gives up, per its
//     documentation, is deduplicating a cancelled record that is
//     produced again; the relay's retry of a record Publish gave up on
//     was never deduplicated anyway. After such a cancellation kgo bumps
//     its producer epoch, so a late copy of the cancelled record cannot
//     land after this client's next record on that partition. It is what
//     makes [Sink.LandingBound] finite;
//   - unless transactional, kgo.ProduceRequestTimeout(3s) and
//     kgo.RequestTimeoutOverhead(2s) (kgo's defaults are 10s each), which
//     keep the landing bound at 10s with the default PublishTimeout.
//     Slower links or brokers need larger values, and a longer LeaseTTL
//     in the relay;
//   - a connection hook that remembers the last failed connection, so a
//     publish that times out says why.
//
// A sink Dial built (not transactional) also purges a topic from its
// client's producer state (kgo's Client.PurgeTopicsFromProducing) when a
// record of it failed with UNKNOWN_TOPIC_ID or INCONSISTENT_TOPIC_ID: kgo
// keeps the topic ID it first saw, so a topic deleted and created again
// would otherwise fail until the client is rebuilt. The entries come back
// as transient failures and the next attempt loads the new topic ID.
//
// With [Options.TransactionalIDPrefix] set, Dial builds one client per
// outbox partition on first use, each with kgo.TransactionalID(prefix +
// partition); kopts must not set a TransactionalID of their own.
func Dial(seeds []string, opts Options, kopts ...kgo.Opt) (*Sink, error) {
	if len(seeds) == 0 {
		return nil, errors.New("kafkasink: Dial needs at least one seed broker (host:port)")
	}
	if err := opts.validate(); err != nil {
		return nil, err
	}
	opts = opts.withDefaults()
	conn := &connWatch{}
	base := []kgo.Opt{
		kgo.SeedBrokers(seeds...),
		kgo.RecordRetries(dialRecordRetries),
		kgo.MetadataMinAge(dialMetadataMinAge),
		kgo.ProducerLinger(dialProducerLinger),
		kgo.WithHooks(conn),
	}
	if opts.PublishTimeout > 0 {
		base = append(base, kgo.RecordDeliveryTimeout(opts.PublishTimeout))
	}
	if opts.TransactionalIDPrefix == "" {
		base = append(base,
			kgo.AllowIdempotentProduceCancellation(),
			kgo.ProduceRequestTimeout(dialProduceRequestTimeout),
			kgo.RequestTimeoutOverhead(dialRequestTimeoutOverhead),
		)
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
		if v, _ := probe.OptValue(kgo.AllowIdempotentProduceCancellation).(bool); v && err == nil {
			err = errors.New("kafkasink: kgo.AllowIdempotentProduceCancellation cannot be used with Options.TransactionalIDPrefix (kgo does not allow it with a transactional ID); drop it")
		}
		probe.Close()
		if err != nil {
			return nil, err
		}
		s.landing = s.landingBound(nil)
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
	s := &Sink{client: client, owned: true, opts: opts, conn: conn}
	s.landing = s.landingBound(client)
	return s, nil
}

// Client returns the sink's client: the one given to [New], or the one
// [Dial] built. It is nil for a transactional sink, which has one client
// per partition.
func (s *Sink) Client() *kgo.Client { return s.client }

// LandingBound reports how long after Publish returns a record that
// Publish handed to the client can still be written to Kafka, or
// [LandingUnbounded] (negative) when nothing the sink knows of bounds it.
// A relay that stops publishing under a lease LandingBound before the
// lease can pass to another relay does not have a record of its own land
// after the next holder's, under the assumption stated below (see
// docs/kafka.md, "Lease boundary and stale records"). It is fixed when the
// sink is built and safe for concurrent use.
//
// Publish returns by its deadline, but it cannot recall records kgo
// already holds, and the broker appends a produce request it has received
// even when the client has given up on it. The bound is, in order:
//
//   - [Options.LandingBound], when set.
//   - 0 in transactional mode: a stale relay's records can still be
//     written, but they become visible to read_committed consumers only
//     if its transaction commits, and the transaction coordinator
//     completes a commit it took before the next holder's
//     InitProducerID and refuses one after it, so they precede every
//     record of the next holder, whatever the timing. (read_uncommitted
//     consumers do see aborted records, in the order they were written.)
//   - [LandingUnbounded] for a client without
//     kgo.AllowIdempotentProduceCancellation (kgo's default, so a
//     client given to [New] unless it sets it): kgo's idempotent
//     producer never fails a record it may have sent until a broker
//     answers for it; it re-sends it after every broken connection, for
//     as long as that takes, and RecordDeliveryTimeout and RecordRetries
//     do not apply to it.
//   - Otherwise K + ProduceRequestTimeout + RequestTimeoutOverhead, from
//     the client's options. With the option, kgo fails a batch once the
//     context of the batch's first record ends (Publish ends its
//     context when it returns) or RecordDeliveryTimeout passes, even
//     when sent, and does not send it again. A record that shares a
//     batch with an earlier record of another Publish call goes with
//     that record, so kgo may send it up to K after it was produced:
//     RecordDeliveryTimeout, or for a client [Dial] built (only Publish
//     produces through it, so every record's context ends within
//     PublishTimeout) the smaller of that and PublishTimeout.
//     ProduceRequestTimeout + RequestTimeoutOverhead is how long kgo
//     waits for the answer to a produce request before it drops the
//     connection as dead. Without a positive K it is
//     [LandingUnbounded].
//
// The last case assumes a broker appends a produce request within the
// time kgo waits for its answer: no client setting bounds how long a
// broker holds a request it has read, and one that stalls longer (a long
// pause with the request read) can append it later. Topics with
// message.timestamp.before.max.ms make the broker refuse such a record;
// declare that bound in [Options.LandingBound].
//
// With [Dial]'s defaults it is 5s + 3s + 2s = 10s.
func (s *Sink) LandingBound() time.Duration { return s.landing }

func (s *Sink) landingBound(client *kgo.Client) time.Duration {
	switch {
	case s.opts.LandingBound > 0:
		return s.opts.LandingBound
	case client == nil: // transactional
		return 0
	}
	if cancel, _ := client.OptValue(kgo.AllowIdempotentProduceCancellation).(bool); !cancel {
		return LandingUnbounded
	}
	keep, _ := client.OptValue(kgo.RecordDeliveryTimeout).(time.Duration)
	if pt := s.opts.PublishTimeout; s.owned && pt > 0 && (keep <= 0 || pt < keep) {
		keep = pt
	}
	if keep <= 0 {
		return LandingUnbounded
	}
	produce, _ := client.OptValue(kgo.ProduceRequestTimeout).(time.Duration)
	overhead, _ := client.OptValue(kgo.RequestTimeoutOverhead).(time.Duration)
	return keep + produce + overhead
}

// Close closes the clients [Dial] built (a client given to [New] stays
// open), and the client the sink built to retry oversize records alone.
// Publish must not be called after Close. Close is idempotent.
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
// back as they are. Publish does not retain msgs or their payloads (each
// record gets a copy of its payload).
//
// Publish returns by the earlier of ctx's deadline (or cancellation) and
// PublishTimeout, within the time it takes to notice: records not
// acknowledged by then fail, with ctx's error when ctx ended. Their fate
// is unknown: a record kgo already sent, or still holds, may yet be
// written, as a duplicate, up to [Sink.LandingBound] later. When Publish
// returns it ends the context of every record it produced, so kgo fails
// what it still holds of them: records not yet sent and, with
// kgo.AllowIdempotentProduceCancellation (as [Dial] sets), records already
// sent, except records in a Kafka batch that another call's record leads,
// which go with that record.
func (s *Sink) Publish(ctx context.Context, msgs []outbox.Entry) []error {
	errs := make([]error, len(msgs))
	if len(msgs) == 0 {
		return errs
	}
	var (
		pctx   context.Context
		cancel context.CancelFunc
	)
	if s.opts.PublishTimeout > 0 {
		pctx, cancel = context.WithTimeout(ctx, s.opts.PublishTimeout)
	} else {
		pctx, cancel = context.WithCancel(ctx)
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
	produceAll(pctx, s.client, recs, errs)
	s.isolateTooLarge(pctx, s.client, recs, errs)
	var recreated []string
	// behind holds the Kafka partitions in which a record of this call
	// failed: kgo fails the later records of a partition with the error
	// of the batch that failed, though they were not in it.
	var behind map[kafkaPartition]string
	for i := range errs {
		if s.owned && recs[i] != nil && topicRecreated(errs[i]) && !slices.Contains(recreated, recs[i].Topic) {
			recreated = append(recreated, recs[i].Topic)
		}
		failedBefore := ""
		var kp kafkaPartition
		if recs[i] != nil && errs[i] != nil {
			kp = kafkaPartition{recs[i].Topic, recs[i].Partition}
			failedBefore = behind[kp]
		}
		errs[i] = s.finish(ctx, pctx, &msgs[i], recs[i], errs[i])
		switch {
		case errs[i] == nil || recs[i] == nil:
		case failedBefore == "":
			if behind == nil {
				behind = map[kafkaPartition]string{}
			}
			behind[kp] = msgs[i].ID
		case backoff.ClassOf(errs[i]) == backoff.ClassPermanent && batchRefused(errs[i]):
			// It failed with an earlier record of its partition, and it
			// need not be at fault itself: retry it rather than park it.
			errs[i] = backoff.Transient(fmt.Errorf("kafkasink: entry %s failed with entry %s, an earlier record of its Kafka partition (%s[%d]); retried on its own: %w",
				msgs[i].ID, failedBefore, kp.topic, kp.partition, errs[i]))
		}
	}
	if len(recreated) > 0 {
		// kgo keeps the topic ID it first saw and fails the topic with
		// UNKNOWN_TOPIC_ID until the topic is purged from producing.
		s.client.PurgeTopicsFromProducing(recreated...)
	}
	s.parkOvertaken(recs, errs)
	return errs
}

// parkOvertaken makes permanent each retryable failure of a keyed entry
// that a later entry of its key (and topic) in the same call overtook:
// that entry was written to Kafka, so the failed one can no longer be
// delivered before it, and a retry would break the key's order. It
// happens when a Kafka batch fails while the call is still producing:
// kgo fails the records of the partition it holds, but writes the records
// produced after it handled the failure, under a new producer sequence.
// The relay parks such an entry (the key goes on); requeueing it delivers
// it after the entries that overtook it.
// Records are grouped by the Kafka topic and key they were produced with
// (as produceAll groups them). The IDs in the reason come from the
// entries' errors, which name them.
func (s *Sink) parkOvertaken(recs []*kgo.Record, errs []error) {
	var failed map[[2]string][]int // retryable failures not yet overtaken
	for i, rec := range recs {
		if rec == nil || rec.Key == nil {
			continue
		}
		switch {
		case errs[i] == nil:
			if failed == nil {
				continue // nothing failed retryably so far: the common case
			}
			tk := [2]string{rec.Topic, string(rec.Key)}
			for _, f := range failed[tk] {
				errs[f] = backoff.Permanent(fmt.Errorf("kafkasink: a later record of its key (%s, at position %d of this publish call) was written to Kafka, so delivering this one now would break its key's order; parked (requeue it if the order of key %q does not matter: it is then delivered after that record): %w",
					s.entryIDOf(recs[i]), i, rec.Key, errs[f]))
			}
			delete(failed, tk)
		case backoff.ClassOf(errs[i]) != backoff.ClassPermanent:
			if failed == nil {
				failed = map[[2]string][]int{}
			}
			tk := [2]string{rec.Topic, string(rec.Key)}
			failed[tk] = append(failed[tk], i)
		}
	}
}

// entryIDOf is the entry ID a record carries in the sink's ID header, or
// "?" when it carries none.
func (s *Sink) entryIDOf(rec *kgo.Record) string {
	for _, h := range rec.Headers {
		if h.Key == s.opts.IDHeader {
			return string(h.Value)
		}
	}
	return "?"
}

// produceAll produces every non-nil record whose errs slot is nil through
// client and stores each outcome in errs. It returns as soon as every
// record is answered or ctx ends, whichever is first; then the records
// still unanswered fail with ctx's error and their promises are ignored.
//
// It does not wait for kgo: kgo cannot fail a record of the idempotent
// producer that it sent to a broker which has not answered (unless the
// client allows idempotent produce cancellation), and the broker may yet
// write it. Such a record may be written after produceAll returned,
// which is a duplicate, never a loss (see Sink.LandingBound).
func produceAll(ctx context.Context, client *kgo.Client, recs []*kgo.Record, errs []error) {
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
	// failed holds the topic and key of every record that failed so far:
	// a later record of the key is not produced (kgo would write it if it
	// came after kgo handled the failure, ahead of the failed one's retry;
	// see parkOvertaken), it fails as not sent.
	// (nil until a keyed record fails: nothing is looked up per record
	// before that.)
	var failed map[[2]string]int
	for i, rec := range recs {
		if rec == nil || errs[i] != nil {
			answered[i] = true
			continue
		}
		mu.Lock()
		if failed != nil && rec.Key != nil {
			if first, ok := failed[[2]string{rec.Topic, string(rec.Key)}]; ok {
				errs[i], answered[i] = backoff.Transient(fmt.Errorf("kafkasink: not sent: the record of its key at position %d of this publish call failed first, and a later one written now would overtake its retry", first)), true
				mu.Unlock()
				continue
			}
		}
		pending++
		mu.Unlock()
		client.Produce(ctx, rec, func(r *kgo.Record, err error) {
			mu.Lock()
			defer mu.Unlock()
			if abandoned {
				return
			}
			if err != nil && r.Key != nil {
				if failed == nil {
					failed = map[[2]string]int{}
				}
				tk := [2]string{r.Topic, string(r.Key)}
				if _, ok := failed[tk]; !ok {
					failed[tk] = i
				}
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
	mu.Lock()
	defer mu.Unlock()
	abandoned = true
	for i := range recs {
		if !answered[i] {
			errs[i] = ctx.Err()
		}
	}
}

// batchRefused reports whether err is a broker's refusal of a Kafka batch
// for what one of its records holds (the broker does not say which):
// kgo fails the partition's later records with the same error, though
// they were not in that batch. Errors about the topic or the client
// (authorization, an invalid topic, its message format) and too large
// records (isolateTooLarge retries them alone) are not such refusals.
func batchRefused(err error) bool {
	return errors.Is(err, kerr.InvalidRecord) || errors.Is(err, kerr.PolicyViolation)
}

// kafkaPartition names a partition of a Kafka topic.
type kafkaPartition struct {
	topic     string
	partition int32
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
	// A copy: kgo may still hold the record after Publish returned.
	rec := &kgo.Record{Topic: topic, Value: bytes.Clone(e.Payload)}
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

// finish turns a produce outcome into the error Publish returns for e,
// whose record is rec (nil when it could not become one). ctx is the
// caller's context, pctx the one bounded by PublishTimeout.
func (s *Sink) finish(ctx, pctx context.Context, e *outbox.Entry, rec *kgo.Record, err error) error {
	if err == nil {
		if rec != nil {
			s.topics.ok(rec.Topic)
		}
		return nil
	}
	var c backoff.Classifier
	if errors.As(err, &c) {
		return err // built by the sink, already classified
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		if ctxErr := ctx.Err(); ctxErr != nil {
			return ctxErr // the caller's context ended: pass it through
		}
		if pctx.Err() != nil {
			err = fmt.Errorf("kafkasink: entry %s not acknowledged within PublishTimeout %v (brokers unreachable or slow, or the partition has no leader%s; it may still be written, as a duplicate): %w",
				e.ID, s.opts.PublishTimeout, s.conn.last(), err)
			return backoff.SemiTransient(err)
		}
		// Neither of ours: kgo fails a Kafka partition's buffered records
		// together, here because a record of another Publish call, first
		// in the batch, saw its context end.
		err = fmt.Errorf("kafkasink: entry %s failed with the records it shared a Kafka partition with, whose publish ended first (slow or unreachable broker%s; it may still be written, as a duplicate): %w",
			e.ID, s.conn.last(), err)
		return backoff.SemiTransient(err)
	}
	class := s.opts.Classify(err)
	if rec != nil && class != backoff.ClassPermanent && topicUnknown(err) {
		return s.unknownTopic(e, rec.Topic, err, class)
	}
	err = fmt.Errorf("kafkasink: publish entry %s: %w%s", e.ID, err, hint(err, class, s.conn))
	return backoff.Mark(err, class)
}

var _ outbox.KeyOrderer = (*Sink)(nil)

// KeepsKeyOrder implements [outbox.KeyOrderer]: it reports true, except in
// transactional mode, so the relay hands it many entries of one key in one
// Publish call. Records of one key and topic go to one Kafka partition
// (kgo's default partitioner hashes the key; a custom kgo.RecordPartitioner
// must map a key to one partition too), and the idempotent producer, which
// New and Dial require, writes a partition's records in the order they
// were produced. When a Kafka batch fails, kgo fails every later record of
// the partition it holds, and the broker refuses a later batch whose
// sequence number does not follow the last one it wrote. But kgo writes
// the records produced after it handled the failure under a new producer
// sequence, so while a call is still producing, a later record of a key
// can be written after an earlier one failed; Publish then reports the
// earlier one permanent (the relay parks it), never retryable, so no
// entry is delivered after a later one of its key except by a requeue
// (see docs/kafka.md, "Hot keys"; TestPublishOfOneKeyFailsTheRecordsAfterAFailure
// and TestRelayDrainsAHotKeyInOrderThroughFaults show it against kfake).
// Records kgo refuses before buffering them (one too large for a batch by
// itself) fail permanently too.
//
// A transactional sink reports false: it retries records that failed as
// too large in transactions of their own, which could reorder a key.
func (s *Sink) KeepsKeyOrder() bool { return s.txn == nil }
