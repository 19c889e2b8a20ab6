package kafkasink

import (
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outboxrelay/outbox"
	"github.com/outboxrelay/outbox/internal/sinkhealth"
)

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
	topics topicWatch        // topics found unknown, for UnknownTopicTimeout
	health sinkhealth.Health // whether every publish fails, for Failing
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
		return nil, fmt.Errorf("kafkasink: %s needs one client per partition; use Dial instead of New", opts.name("TransactionalIDPrefix"))
	}
	if err := opts.validate(); err != nil {
		return nil, err
	}
	if err := checkClient(client, false, opts); err != nil {
		return nil, err
	}
	s := &Sink{client: client, opts: opts.withDefaults()}
	s.landing = s.landingBound(client)
	return s, nil
}

func checkClient(client *kgo.Client, transactional bool, opts Options) error {
	if v, _ := client.OptValue(kgo.DisableIdempotentWrite).(bool); v {
		return errors.New("kafkasink: the client disables idempotent writes; drop kgo.DisableIdempotentWrite, the sink relies on the idempotent producer for per-key order")
	}
	if v, _ := client.OptValue(kgo.ManualFlushing).(bool); v {
		return errors.New("kafkasink: the client uses kgo.ManualFlushing; drop it, Publish relies on kgo flushing records itself")
	}
	if vs := client.OptValues(kgo.TransactionalID); !transactional && len(vs) == 2 && vs[1] == true {
		return fmt.Errorf("kafkasink: the client has a kgo.TransactionalID; drop it, or use Dial with %s for transactional publishing", opts.name("TransactionalIDPrefix"))
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
		err = checkClient(probe, false, opts)
		if v, _ := probe.OptValue(kgo.AllowIdempotentProduceCancellation).(bool); v && err == nil {
			err = fmt.Errorf("kafkasink: kgo.AllowIdempotentProduceCancellation cannot be used with %s (kgo does not allow it with a transactional ID); drop it", opts.name("TransactionalIDPrefix"))
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
	if err := checkClient(client, false, opts); err != nil {
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
