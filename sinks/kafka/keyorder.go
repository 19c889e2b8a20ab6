package kafkasink

import (
	"fmt"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outboxrelay/outbox"
	"github.com/outboxrelay/outbox/backoff"
)

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
