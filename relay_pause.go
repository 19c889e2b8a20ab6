package outbox

import (
	"context"
	"log/slog"
	"sync/atomic"
	"time"
)

// Following the pauses of a store that implements [Pauser]: the
// relay's coordinator reads [Pauser.Paused] when the relay starts and then
// every PollInterval, logs each change, exports the paused topics and
// partitions as gauges, wakes the workers on a resume, and the workers
// hand no entry of a paused topic or partition to the sink once the relay
// knows of the pause (see holdPaused), even from a batch fetched before it.

// pauses is what the relay knows of the store's pauses. The coordinator's
// goroutine writes it (read); workers and the metrics read it (current).
type pauses struct {
	// store is the store as a Pauser, nil when it is not one: then nothing
	// is ever paused.
	store Pauser
	log   *slog.Logger
	// wake wakes the workers of the relay (all of them for a topic, the
	// one of the partition for a partition).
	wake func(partition int)

	// stores summarises the failures of Paused with the relay's other
	// store failures.
	stores *storeLog

	now atomic.Pointer[pausedSet]
}

// pausedSet is one reading of [Pauser.Paused], by topic and partition,
// with each pause's Since.
type pausedSet struct {
	topics     map[string]time.Time
	partitions map[int]time.Time
}

// topic reports whether topic is paused; a nil set pauses nothing.
func (s *pausedSet) topic(topic string) bool {
	if s == nil {
		return false
	}
	_, ok := s.topics[topic]
	return ok
}

// partition reports whether partition is paused; a nil set pauses
// nothing.
func (s *pausedSet) partition(p int) bool {
	if s == nil {
		return false
	}
	_, ok := s.partitions[p]
	return ok
}

// topicSet is the paused topics with their Since (nil for a nil set).
func (s *pausedSet) topicSet() map[string]time.Time {
	if s == nil {
		return nil
	}
	return s.topics
}

// partitionSet is the paused partitions with their Since (nil for a nil
// set).
func (s *pausedSet) partitionSet() map[int]time.Time {
	if s == nil {
		return nil
	}
	return s.partitions
}

// empty reports whether nothing is paused.
func (s *pausedSet) empty() bool {
	return s == nil || len(s.topics) == 0 && len(s.partitions) == 0
}

func newPausedSet(p Paused) *pausedSet {
	s := &pausedSet{topics: make(map[string]time.Time, len(p.Topics)), partitions: make(map[int]time.Time, len(p.Partitions))}
	for _, t := range p.Topics {
		s.topics[t.Topic] = t.Since
	}
	for _, pp := range p.Partitions {
		s.partitions[pp.Partition] = pp.Since
	}
	return s
}

// init follows store's pauses when it is a [Pauser]; wake(p) wakes the
// worker of partition p, or every worker for [AllPartitions].
func (ps *pauses) init(store Store, log *slog.Logger, wake func(partition int)) {
	ps.store, _ = store.(Pauser)
	ps.log, ps.wake = log, wake
}

// enabled reports whether the store can pause.
func (ps *pauses) enabled() bool { return ps.store != nil }

// current is what the relay last read of the store's pauses (nil before
// the first reading, or when the store cannot pause: nothing paused).
func (ps *pauses) current() *pausedSet { return ps.now.Load() }

// read reads the store's pauses and logs what changed since the last
// reading: a topic or partition paused or resumed, each once, at INFO.
// After a resume it wakes the workers concerned, so delivery restarts at
// once rather than at the next poll. When Paused fails the relay keeps
// what it knew; the failures are summarised with the relay's other store
// failures (see storeLog: one WARN when they start, a count while they
// last, one INFO when a reading succeeds again).
func (ps *pauses) read(ctx context.Context) {
	if ps.store == nil {
		return
	}
	began := ps.stores.now()
	p, err := ps.store.Paused(ctx)
	if err != nil {
		ps.stores.failed(ctx, opPauses, noPartition, began, err)
		return
	}
	ps.stores.ok(opPauses, noPartition)
	next := newPausedSet(p)
	prev := ps.now.Swap(next)
	if prev == nil {
		prev = &pausedSet{}
	}
	for _, t := range p.Topics {
		if !prev.topic(t.Topic) {
			ps.log.Info("outbox relay: topic paused", "topic", t.Topic, "since", t.Since)
		}
	}
	for _, pp := range p.Partitions {
		if !prev.partition(pp.Partition) {
			ps.log.Info("outbox relay: partition paused", "partition", pp.Partition, "since", pp.Since)
		}
	}
	wakeAll := false
	for topic, since := range prev.topics {
		if !next.topic(topic) {
			ps.log.Info("outbox relay: topic resumed", "topic", topic, "paused_since", since)
			wakeAll = true
		}
	}
	for part, since := range prev.partitions {
		if !next.partition(part) {
			ps.log.Info("outbox relay: partition resumed", "partition", part, "paused_since", since)
			if !wakeAll {
				ps.wake(part)
			}
		}
	}
	if wakeAll {
		ps.wake(AllPartitions)
	}
}

// holdPaused gives back (out.skipped), unattempted, the entries of round
// that the relay knows to be paused (every entry when the worker's
// partition is, else those of paused topics), and holds their keys back
// for the rest of the batch (failedKeys), so a later entry of such a key
// is not delivered before it. It returns the others. The store no longer
// returns such entries once paused; this stops a batch fetched (or
// prefetched) before the pause from reaching the sink.
func (w *worker) holdPaused(round []Entry, failedKeys map[string]bool, out *outcomes) []Entry {
	ps := w.cfg.pauses.current()
	if ps.empty() {
		return round
	}
	whole := ps.partition(w.partition)
	live := round[:0:0]
	for _, e := range round {
		if !whole && !ps.topic(e.Topic) {
			live = append(live, e)
			continue
		}
		out.skipped = append(out.skipped, e.ID)
		if e.Key != "" && !w.cfg.unordered {
			failedKeys[e.Key] = true
		}
	}
	return live
}
