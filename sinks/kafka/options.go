package kafkasink

import (
	"fmt"
	"strings"
	"time"

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

	// Now is the sink's clock, read for UnknownTopicTimeout and
	// [Sink.Failing]. Default
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

	// OptionName gives the name under which the sink's messages (the
	// errors Publish returns, which the relay logs and keeps as parked
	// reasons, and the errors of New and Dial) refer to an option, given
	// its Go name: a field of Options ("UnknownTopicTimeout",
	// "PublishTimeout", ...) or a kgo option ([OptionAutoTopicCreation]).
	// A program that sets the options from its own flags or settings sets
	// it to name those (the outbox relay command answers
	// "--kafka-unknown-topic-timeout" for "UnknownTopicTimeout"); an
	// answer of "" keeps the default for that option. Default: the Go
	// name, "Options.UnknownTopicTimeout" for a field and the name itself
	// for a kgo option.
	OptionName func(option string) string
}

// OptionAutoTopicCreation is the name [Options.OptionName] is asked for
// when a message refers to the client's topic auto-creation
// (kgo.AllowAutoTopicCreation).
const OptionAutoTopicCreation = "kgo.AllowAutoTopicCreation"

// name is how the sink's messages refer to option (a field of Options, or
// a kgo option): as OptionName says, else by its Go name.
func (o Options) name(option string) string {
	if o.OptionName != nil {
		if n := o.OptionName(option); n != "" {
			return n
		}
	}
	if strings.HasPrefix(option, "kgo.") {
		return option
	}
	return "Options." + option
}

func (o Options) validate() error {
	if o.LandingBound < 0 {
		return fmt.Errorf("kafkasink: %s is %v; declare a positive bound, or leave it 0 to have it computed", o.name("LandingBound"), o.LandingBound)
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
