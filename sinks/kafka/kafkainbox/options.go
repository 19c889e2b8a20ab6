package kafkainbox

import (
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outboxrelay/outbox/inbox"
)

// Defaults of [Options].
const (
	// DefaultMaxBatch is the most records of one partition handled in one
	// transaction when Options.MaxBatch is 0.
	DefaultMaxBatch = 500
	// DefaultRetryBackoff is the pause before the first retry of a failed
	// batch when Options.RetryBackoff is 0.
	DefaultRetryBackoff = 100 * time.Millisecond
	// DefaultMaxRetryBackoff caps the doubling pause between retries of a
	// failed batch when Options.MaxRetryBackoff is 0.
	DefaultMaxRetryBackoff = 10 * time.Second
	// DefaultStopTimeout is how long Run lets the batches in flight
	// finish once its context is done, when Options.StopTimeout is 0.
	DefaultStopTimeout = 10 * time.Second
)

// Options configure a [Consumer]. Group and Topics are required; the zero
// value of every other field is its default.
type Options struct {
	// Group is the Kafka consumer group, and the group under which the
	// inbox store keeps the partitions' offsets (inbox.Offset.Group).
	// Required.
	Group string
	// Topics are the topics consumed. Required, none empty.
	Topics []string
	// MaxBatch is the most records of one partition handled in one
	// transaction (one inbox.Inbox.HandleBatch). A poll's records of a
	// partition are handled in order, in batches of at most MaxBatch.
	// Default (0) [DefaultMaxBatch]; 1 is a transaction per record.
	// Larger batches cost fewer commits per record but hold the
	// transaction's locks longer, and a failure retries the whole batch.
	MaxBatch int
	// ResetOffset is where a partition the inbox store has no offset for
	// (never handled by this group) starts, and where kgo resets a
	// partition whose stored offset is out of range (deleted by
	// retention, or the topic was recreated). Default (the zero
	// kgo.Offset): kgo.NewOffset().AtStart(), the start of the partition.
	// Use kgo.NewOffset().AtEnd() to skip what the topic held before the
	// group first ran.
	ResetOffset kgo.Offset
	// DisableKafkaCommit turns off committing the handled offsets to
	// Kafka. By default (false) the consumer also commits them to the
	// Kafka group (marked after each transaction, committed by kgo's
	// autocommit every 5s and when partitions are revoked) so that lag
	// monitors that read the group's commits keep working. Those commits
	// are never read back: the inbox store's offsets are the source of
	// truth.
	DisableKafkaCommit bool
	// RetryBackoff is the pause before a failed batch of a partition is
	// tried again, doubled after each further failure up to
	// MaxRetryBackoff. Default (0) [DefaultRetryBackoff].
	RetryBackoff time.Duration
	// MaxRetryBackoff caps the pause between tries of a failed batch.
	// Default (0) [DefaultMaxRetryBackoff].
	MaxRetryBackoff time.Duration
	// MaxAttempts is how many times a batch of a partition is tried
	// before Run gives up and returns a [*BatchError]. Default (0): it is
	// tried forever, with backoff and a log line per failed attempt, while
	// the other partitions go on.
	MaxAttempts int
	// StopTimeout is how long Run, once its context is done, lets the
	// batches in flight commit (no new batch starts) before it cancels
	// their context, which rolls them back. Default (0)
	// [DefaultStopTimeout].
	StopTimeout time.Duration
	// Retention, when positive, makes the Consumer run the inbox's
	// janitor (inbox.Inbox.RunJanitor, with JanitorOptions.Retention set
	// to Retention and Interval to JanitorInterval) while this member of
	// the group holds partition 0 of Topics[0] and Run runs: one janitor
	// per group, handed over with that partition at a rebalance (it stops
	// when the partition is revoked or lost, before the partition goes to
	// another member). Give every member the same Topics, in the same
	// order. See inbox.JanitorOptions.Retention for how long to keep
	// records. Default 0: no janitor (run inbox.RunJanitor yourself).
	Retention time.Duration
	// JanitorInterval is the wait between two rounds of the janitor
	// Retention turns on. Default (0) inbox.JanitorOptions' default, 1
	// minute.
	JanitorInterval time.Duration
	// Logger receives a line per failed attempt and per Kafka error.
	// Default slog.Default().
	Logger *slog.Logger
}

func (o *Options) setDefaults() error {
	if o.Group == "" {
		return fmt.Errorf("kafkainbox: Options.Group is required; set it to the consumer group's name: %w", inbox.ErrInvalidArgument)
	}
	if len(o.Topics) == 0 || slices.Contains(o.Topics, "") {
		return fmt.Errorf("kafkainbox: Options.Topics must name at least one topic, none empty: %w", inbox.ErrInvalidArgument)
	}
	if o.MaxBatch < 0 || o.RetryBackoff < 0 || o.MaxRetryBackoff < 0 || o.MaxAttempts < 0 || o.StopTimeout < 0 {
		return fmt.Errorf("kafkainbox: Options.MaxBatch, RetryBackoff, MaxRetryBackoff, MaxAttempts and StopTimeout must not be negative (0 is the default): %w", inbox.ErrInvalidArgument)
	}
	if o.Retention < 0 || o.JanitorInterval < 0 {
		return fmt.Errorf("kafkainbox: Options.Retention and JanitorInterval must not be negative (0 turns the janitor off, and is the default interval): %w", inbox.ErrInvalidArgument)
	}
	o.Topics = slices.Clone(o.Topics)
	if o.MaxBatch == 0 {
		o.MaxBatch = DefaultMaxBatch
	}
	if o.ResetOffset == (kgo.Offset{}) {
		o.ResetOffset = kgo.NewOffset().AtStart()
	}
	if o.RetryBackoff == 0 {
		o.RetryBackoff = DefaultRetryBackoff
	}
	if o.MaxRetryBackoff == 0 {
		o.MaxRetryBackoff = DefaultMaxRetryBackoff
	}
	if o.MaxRetryBackoff < o.RetryBackoff {
		return fmt.Errorf("kafkainbox: Options.MaxRetryBackoff %v is below RetryBackoff %v; raise it: %w", o.MaxRetryBackoff, o.RetryBackoff, inbox.ErrInvalidArgument)
	}
	if o.StopTimeout == 0 {
		o.StopTimeout = DefaultStopTimeout
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return nil
}

// backoff is the pause after the attempt-th failed attempt (1-based):
// RetryBackoff doubling, at most MaxRetryBackoff.
func (o *Options) backoff(attempt int) time.Duration {
	d := o.RetryBackoff
	for i := 1; i < attempt && d < o.MaxRetryBackoff; i++ {
		d *= 2
	}
	return min(d, o.MaxRetryBackoff)
}

// BatchError is what Run returns when a batch of a partition failed
// Options.MaxAttempts times. The inbox store's offset of the partition
// stays at Offset: a consumer of the group started again resumes there.
type BatchError struct {
	Topic     string
	Partition int32
	// Offset is the first record of the batch that failed.
	Offset int64
	// Attempts is how many times the batch was tried.
	Attempts int
	// Err is the last attempt's error.
	Err error
}

// Error names the partition, the offset and the attempts, and says what
// to do.
func (e *BatchError) Error() string {
	return fmt.Sprintf("kafkainbox: the batch of %s[%d] from offset %d failed %d times, last: %v; fix the handler or the record, then start the consumer again: it resumes at that offset",
		e.Topic, e.Partition, e.Offset, e.Attempts, e.Err)
}

// Unwrap returns the last attempt's error.
func (e *BatchError) Unwrap() error { return e.Err }

// errNoConsumer guards the methods of a nil or zero Consumer.
var errNoConsumer = errors.New("kafkainbox: a Consumer made without NewConsumer; call NewConsumer")
