package kafkasink

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outboxrelay/outbox/backoff"
)

// permanent lists the Kafka errors no retry can fix: the relay parks the
// entry. None of them is caused by a topic being created or a leader
// moving (see docs/kafka.md, "Error classification", for each one's
// reason). The errors of a topic the brokers do not know yet
// (UNKNOWN_TOPIC_OR_PARTITION, UNKNOWN_TOPIC_ID, INCONSISTENT_TOPIC_ID)
// are not here: they are transient, and the sink parks their entries only
// after Options.UnknownTopicTimeout.
var permanent = map[int16]bool{
	kerr.MessageTooLarge.Code:                    true,
	kerr.RecordListTooLarge.Code:                 true,
	kerr.InvalidTopicException.Code:              true,
	kerr.TopicAuthorizationFailed.Code:           true,
	kerr.ClusterAuthorizationFailed.Code:         true,
	kerr.TransactionalIDAuthorizationFailed.Code: true,
	kerr.InvalidRecord.Code:                      true,
	kerr.InvalidRequiredAcks.Code:                true,
	kerr.PolicyViolation.Code:                    true,
	kerr.UnsupportedForMessageFormat.Code:        true,
	kerr.UnsupportedCompressionType.Code:         true,
}

// semiTransient lists the Kafka errors that mean a timeout or a broker
// that cannot be used right now: retried with longer delays.
var semiTransient = map[int16]bool{
	kerr.RequestTimedOut.Code:          true,
	kerr.SaslAuthenticationFailed.Code: true, // every request fails until credentials are fixed
	kerr.BrokerNotAvailable.Code:       true,
	kerr.ThrottlingQuotaExceeded.Code:  true,
	// The record's timestamp is its produce time (kgo sets it): the broker
	// refuses it only when the record took longer than the topic's
	// message.timestamp.before.max.ms to land, or when the relay's clock
	// is off from the broker's. A retry produces it with a fresh
	// timestamp; a bad clock fails every record, which the relay's
	// breaker handles better than parking them all.
	kerr.InvalidTimestamp.Code: true,
}

// Classify returns the class of a produce error, the default of
// [Options.Classify]:
//
//   - permanent: MESSAGE_TOO_LARGE, RECORD_LIST_TOO_LARGE,
//     INVALID_TOPIC_EXCEPTION, TOPIC_AUTHORIZATION_FAILED,
//     CLUSTER_AUTHORIZATION_FAILED, TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
//     INVALID_RECORD, INVALID_REQUIRED_ACKS, POLICY_VIOLATION,
//     UNSUPPORTED_FOR_MESSAGE_FORMAT, UNSUPPORTED_COMPRESSION_TYPE;
//   - semi-transient: context.DeadlineExceeded, kgo.ErrRecordTimeout,
//     REQUEST_TIMED_OUT, BROKER_NOT_AVAILABLE, THROTTLING_QUOTA_EXCEEDED,
//     SASL_AUTHENTICATION_FAILED, INVALID_TIMESTAMP (the sink's
//     timestamps are produce times: the record was delayed past the
//     topic's message.timestamp.before.max.ms, or the clocks disagree),
//     network errors (refused or timed-out connections, EOF),
//     kgo.ErrFirstReadEOF and kgo.ErrClientClosed;
//   - transient: every other error, including every other Kafka error,
//     retriable or not (the relay's attempt limit parks an entry that
//     keeps failing) and context.Canceled. Among them the errors of a
//     leader moving (NOT_LEADER_FOR_PARTITION, LEADER_NOT_AVAILABLE,
//     FENCED_LEADER_EPOCH, NOT_ENOUGH_REPLICAS, ...) and of a topic the
//     brokers do not know (yet): UNKNOWN_TOPIC_OR_PARTITION,
//     UNKNOWN_TOPIC_ID and INCONSISTENT_TOPIC_ID, whose entries a [Sink]
//     parks only once the topic has stayed unknown for
//     [Options.UnknownTopicTimeout].
//
// An error already marked with a class (backoff.Mark) keeps it.
func Classify(err error) backoff.Class {
	if err == nil {
		return backoff.ClassTransient
	}
	var c backoff.Classifier
	if errors.As(err, &c) {
		return c.FailureClass()
	}
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, kgo.ErrRecordTimeout) {
		return backoff.ClassSemiTransient
	}
	var ke *kerr.Error
	if errors.As(err, &ke) {
		switch {
		case permanent[ke.Code]:
			return backoff.ClassPermanent
		case semiTransient[ke.Code]:
			return backoff.ClassSemiTransient
		}
		return backoff.ClassTransient
	}
	var eof *kgo.ErrFirstReadEOF
	var ne net.Error
	var op *net.OpError
	switch {
	case errors.As(err, &eof), errors.As(err, &ne), errors.As(err, &op),
		errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET),
		errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF),
		errors.Is(err, kgo.ErrClientClosed):
		return backoff.ClassSemiTransient
	}
	return backoff.ClassTransient
}

// hint returns advice appended to a classified error's text.
func hint(err error, class backoff.Class, conn *connWatch) string {
	var ke *kerr.Error
	switch {
	case errors.Is(err, kerr.MessageTooLarge), errors.Is(err, kerr.RecordListTooLarge):
		return " (the record alone is over the broker's or topic's max.message.bytes or the client's ProducerBatchMaxBytes; shrink the payload or raise the limits)"
	case topicUnknown(err) && class == backoff.ClassPermanent:
		return " (the topic does not exist and was not created automatically; create it, then requeue the parked entry)"
	case errors.Is(err, kerr.TopicAuthorizationFailed), errors.Is(err, kerr.ClusterAuthorizationFailed):
		return " (grant the relay's principal WRITE on the topic, and IDEMPOTENT_WRITE on the cluster before Kafka 3.0, then requeue)"
	case errors.Is(err, kerr.InvalidTimestamp):
		return " (the record's timestamp is its produce time: it was delayed longer than the topic's message.timestamp.before.max.ms allows, or this host's clock is off from the broker's; it is produced again with a fresh timestamp)"
	case errors.Is(err, kgo.ErrRecordTimeout):
		return conn.last()
	case class == backoff.ClassSemiTransient && !errors.As(err, &ke):
		return conn.last()
	}
	return ""
}

// connWatch is a kgo hook that remembers the last failed broker
// connection, to explain timeouts.
type connWatch struct {
	mu   sync.Mutex
	err  error
	addr string
	at   time.Time
}

// OnBrokerConnect implements kgo.HookBrokerConnect.
func (w *connWatch) OnBrokerConnect(meta kgo.BrokerMetadata, _ time.Duration, _ net.Conn, err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if err != nil {
		w.err, w.addr, w.at = err, net.JoinHostPort(meta.Host, fmt.Sprint(meta.Port)), time.Now()
	} else if w.addr == net.JoinHostPort(meta.Host, fmt.Sprint(meta.Port)) {
		w.err = nil
	}
}

// last describes the last failed connection of the last minute, or "".
func (w *connWatch) last() string {
	if w == nil {
		return ""
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err == nil || time.Since(w.at) > time.Minute {
		return ""
	}
	return fmt.Sprintf("; last connection error %s ago: %v", time.Since(w.at).Round(time.Millisecond), w.err)
}

var _ kgo.HookBrokerConnect = (*connWatch)(nil)
