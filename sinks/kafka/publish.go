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

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outboxrelay/outbox"
	"github.com/outboxrelay/outbox/backoff"
)

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
	defer func() { s.health.Record(ctx, s.opts.Now(), errs) }()
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
	s.retryOrphaned(ctx, pctx, msgs, recs, errs)
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
func produceAll(ctx context.Context, client producer, recs []*kgo.Record, errs []error) {
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

// producer is the part of a *kgo.Client produceAll uses.
type producer interface {
	Produce(ctx context.Context, r *kgo.Record, promise func(*kgo.Record, error))
}

// orphanRetries is how many times Publish produces again the records kgo
// failed with another call's context (see retryOrphaned).
const orphanRetries = 3

// retryOrphaned produces again the records that kgo failed with the
// context of a record of another Publish call: kgo fails a Kafka
// partition's buffered records together with the batch in flight before
// them, and when that batch's first record belongs to a call that has
// returned (its context ended), the records of this call fail with that
// context's error though neither this call's context nor PublishTimeout
// ended. That happens to the first call after one that gave up on a
// slow or unreachable broker, once the broker is back; without the
// retry its entries would fail (an attempt counted, a retry delayed) for
// a fault that is over (the sink conformance suite's Errors and Cancel
// cases publish right after a heal). A record is produced again only if
// no later record of its key and topic in this call was written, so the
// retry cannot overtake; it may write a duplicate of a record that was
// written in the failed batch, as any retry may. At most orphanRetries
// rounds, within PublishTimeout.
func (s *Sink) retryOrphaned(ctx, pctx context.Context, msgs []outbox.Entry, recs []*kgo.Record, errs []error) {
	for range orphanRetries {
		if ctx.Err() != nil || pctx.Err() != nil {
			return
		}
		idx := orphans(recs, errs)
		if len(idx) == 0 {
			return
		}
		again := make([]*kgo.Record, len(idx))
		aerrs := make([]error, len(idx))
		for j, i := range idx {
			again[j], aerrs[j] = s.record(&msgs[i])
		}
		produceAll(pctx, s.client, again, aerrs)
		for j, i := range idx {
			if again[j] != nil {
				recs[i] = again[j]
			}
			errs[i] = aerrs[j]
		}
	}
}

// orphaned reports whether err is a context's error that kgo gave a
// record (the caller checks that it is not this call's context).
func orphaned(err error) bool {
	return errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}

// orphans returns the indexes of the records that failed with a
// context's error and were not overtaken: no later record of their key
// and topic was written.
func orphans(recs []*kgo.Record, errs []error) []int {
	var idx []int
	for i, err := range errs {
		if recs[i] != nil && orphaned(err) {
			idx = append(idx, i)
		}
	}
	if len(idx) == 0 {
		return nil
	}
	lastOK := map[[2]string]int{} // topic and key -> last written index
	for i, err := range errs {
		if err == nil && recs[i] != nil && recs[i].Key != nil {
			lastOK[[2]string{recs[i].Topic, string(recs[i].Key)}] = i
		}
	}
	out := idx[:0]
	for _, i := range idx {
		if recs[i].Key != nil {
			if j, ok := lastOK[[2]string{recs[i].Topic, string(recs[i].Key)}]; ok && j > i {
				continue
			}
		}
		out = append(out, i)
	}
	return out
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
		return nil, backoff.Permanent(fmt.Errorf("kafkasink: entry %s has no topic; set Entry.Topic, %s or %s", e.ID, s.opts.name("DefaultTopic"), s.opts.name("Topic")))
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
			err = fmt.Errorf("kafkasink: entry %s not acknowledged within %s %v (brokers unreachable or slow, or the partition has no leader%s; it may still be written, as a duplicate): %w",
				e.ID, s.opts.name("PublishTimeout"), s.opts.PublishTimeout, s.conn.last(), err)
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
