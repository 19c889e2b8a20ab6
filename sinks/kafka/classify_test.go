package kafkasink_test

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/outboxrelay/outbox/backoff"
	kafkasink "github.com/outboxrelay/outbox/sinks/kafka"
)

// TestClassificationTable checks Classify on every Kafka error code that
// docs/kafka.md ("Error classification") names, bare and wrapped as kgo
// wraps them. The unknown-topic codes are transient here: a Sink parks
// their entries only after Options.UnknownTopicTimeout (see
// TestUnknownTopicParksAfterTimeout).
func TestClassificationTable(t *testing.T) {
	t.Parallel()
	table := map[backoff.Class][]*kerr.Error{
		backoff.ClassPermanent: {
			kerr.MessageTooLarge, kerr.RecordListTooLarge,
			kerr.InvalidTopicException,
			kerr.TopicAuthorizationFailed, kerr.ClusterAuthorizationFailed, kerr.TransactionalIDAuthorizationFailed,
			kerr.InvalidRecord, kerr.InvalidRequiredAcks, kerr.PolicyViolation,
			kerr.UnsupportedForMessageFormat, kerr.UnsupportedCompressionType,
		},
		backoff.ClassSemiTransient: {
			kerr.RequestTimedOut, kerr.BrokerNotAvailable, kerr.ThrottlingQuotaExceeded,
			kerr.SaslAuthenticationFailed, kerr.InvalidTimestamp,
		},
		backoff.ClassTransient: {
			// A topic the brokers do not know (yet): bounded by
			// Options.UnknownTopicTimeout.
			kerr.UnknownTopicOrPartition, kerr.UnknownTopicID, kerr.InconsistentTopicID,
			// A leader moving, replicas catching up.
			kerr.NotLeaderForPartition, kerr.LeaderNotAvailable,
			kerr.FencedLeaderEpoch, kerr.UnknownLeaderEpoch,
			kerr.NotEnoughReplicas, kerr.NotEnoughReplicasAfterAppend,
			kerr.ReplicaNotAvailable, kerr.KafkaStorageError,
			// The rest.
			kerr.NetworkException, kerr.CorruptMessage, kerr.UnknownServerError,
			kerr.OutOfOrderSequenceNumber, kerr.UnknownProducerID,
			kerr.InvalidProducerEpoch, kerr.ProducerFenced,
			kerr.ConcurrentTransactions, kerr.CoordinatorNotAvailable,
			kerr.NotCoordinator, kerr.CoordinatorLoadInProgress,
			kerr.InvalidTxnState, kerr.TransactionAbortable,
			kerr.UnsupportedVersion,
		},
	}
	seen := map[int16]bool{}
	for want, codes := range table {
		for _, code := range codes {
			assert.False(t, seen[code.Code], "%s listed twice", code.Message)
			seen[code.Code] = true
			assert.Equal(t, want, kafkasink.Classify(code), "%s", code.Message)
			wrapped := fmt.Errorf("no partitions available after attempting to refresh metadata 11 times, last err: %w", code)
			assert.Equal(t, want, kafkasink.Classify(wrapped), "wrapped %s", code.Message)
		}
	}
}
