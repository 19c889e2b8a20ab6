package kafkasink

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/outboxrelay/outbox"
	"github.com/outboxrelay/outbox/backoff"
)

// DefaultUnknownTopicTimeout is how long a topic may stay unknown to the
// brokers before its entries park, unless [Options.UnknownTopicTimeout]
// says otherwise.
const DefaultUnknownTopicTimeout = time.Minute

// maxWatchedTopics bounds the topics the sink remembers as unknown; past
// it, the entries of topics not failed within UnknownTopicTimeout are
// forgotten first.
const maxWatchedTopics = 4096

// topicUnknown reports whether err says the brokers do not know the
// record's topic (yet): UNKNOWN_TOPIC_OR_PARTITION, UNKNOWN_TOPIC_ID or
// INCONSISTENT_TOPIC_ID. A topic being created, or deleted and created
// again, answers that way until every broker knows it.
func topicUnknown(err error) bool {
	return errors.Is(err, kerr.UnknownTopicOrPartition) || errors.Is(err, kerr.UnknownTopicID) || errors.Is(err, kerr.InconsistentTopicID)
}

// topicRecreated reports whether err says the topic's ID is not the one
// the client knows (UNKNOWN_TOPIC_ID, INCONSISTENT_TOPIC_ID): the topic was
// deleted and created again, or a broker does not know it yet.
func topicRecreated(err error) bool {
	return errors.Is(err, kerr.UnknownTopicID) || errors.Is(err, kerr.InconsistentTopicID)
}

// topicWatch remembers, per topic, when publishing to it first failed
// because the brokers did not know it, since the last record of the topic
// that was acknowledged.
type topicWatch struct {
	n     atomic.Int64 // len(since), read without the lock
	mu    sync.Mutex
	since map[string]watched
}

type watched struct{ first, last time.Time }

// failed records a failure of topic as unknown at now and returns since
// when it has failed.
func (w *topicWatch) failed(topic string, now time.Time, keep time.Duration) time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.since == nil {
		w.since = map[string]watched{}
	}
	t, ok := w.since[topic]
	if !ok {
		if len(w.since) >= maxWatchedTopics {
			for k, v := range w.since {
				if now.Sub(v.last) > keep {
					delete(w.since, k)
				}
			}
		}
		t.first = now
	}
	t.last = now
	w.since[topic] = t
	w.n.Store(int64(len(w.since)))
	return t.first
}

// ok forgets topic: a record of it was acknowledged.
func (w *topicWatch) ok(topic string) {
	if w.n.Load() == 0 {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.since, topic)
	w.n.Store(int64(len(w.since)))
}

// unknownTopic turns the error of e's record, whose topic the brokers did
// not know, into a retryable error of class, or into a permanent one once
// the topic has been unknown for UnknownTopicTimeout. Either names the
// topic.
func (s *Sink) unknownTopic(e *outbox.Entry, topic string, err error, class backoff.Class) error {
	now := s.opts.Now()
	limit := s.opts.UnknownTopicTimeout
	keep := limit
	if keep < 0 {
		keep = DefaultUnknownTopicTimeout
	}
	since := s.topics.failed(topic, now, keep)
	d := now.Sub(since).Round(time.Millisecond)
	opt := s.opts.name("UnknownTopicTimeout")
	if limit >= 0 && now.Sub(since) >= limit {
		return backoff.Permanent(fmt.Errorf("kafkasink: publish entry %s: topic %q has been unknown to the brokers for %v, which reaches %s (%v): %w (create the topic, or let the brokers and the client create it automatically: auto.create.topics.enable and %s; then requeue the parked entry)",
			e.ID, topic, d, opt, limit, err, s.opts.name(OptionAutoTopicCreation)))
	}
	until := "it parks once that reaches " + opt + " (" + limit.String() + ")"
	if limit < 0 {
		until = opt + " is negative: only the relay's attempt limit parks it"
	}
	return backoff.Mark(fmt.Errorf("kafkasink: publish entry %s: topic %q unknown to the brokers (for %v so far; retried, and %s; create it, or let the brokers and the client create it automatically: auto.create.topics.enable and %s): %w",
		e.ID, topic, d, until, s.opts.name(OptionAutoTopicCreation), err), class)
}
