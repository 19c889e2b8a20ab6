package conformance_test

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/outboxrelay/outbox"
)

// pauserVariants break the Pauser. The variants that keep the pause in
// the wrapper (pauseInWrapper) leave the backend unpaused and act on the
// fetches themselves (afterFetchOperate).
var pauserVariants = []variant{
	{"pause-topic-ignored", "PauseTopic is recorded (Paused reports it) but fetches still return the topic's entries", []string{"Pauser/PausedTopicNotFetched"}},
	{"pause-not-holding-key", "a paused topic's entries are left out of fetches but hold back nothing: later entries of their keys in other topics are delivered", []string{"Pauser/PausedTopicNotFetched"}},
	{"pause-counts-attempt", "a fetch fails each entry of a paused topic (an attempt counted, retry at once) instead of leaving it out unchanged", []string{"Pauser/PausedTopicNotFetched"}},
	{"resume-ignored", "ResumeTopic returns nil and leaves the topic paused", []string{"Pauser/ResumeDeliversInKeyOrder"}},
	{"resume-reorders", "ResumeTopic puts the topic's entries back as if appended at the resume, after the later entries of their keys", []string{"Pauser/ResumeDeliversInKeyOrder"}},
	{"pause-partition-ignored", "PausePartition is recorded (Paused reports it) but fetches of the partition still return its entries", []string{"Pauser/PausedPartitionFetchesNothing"}},
	{"pause-partition-unfenced", "a fetch of a paused partition returns nothing without checking the lease", []string{"Pauser/PausedPartitionFetchesNothing"}},
	{"pause-since-reset", "pausing a paused topic or partition restarts its Since", []string{"Pauser/IdempotentAndSinceKept"}},
	{"paused-unsorted", "Paused reports topics and partitions in reverse order", []string{"Pauser/IdempotentAndSinceKept"}},
	{"fetch-batch-ignores-pause", "FetchBatch and FetchNext return the entries of paused topics and partitions (FindPendingBatch leaves them out)", []string{"Pauser/EveryFetchSkipsPaused"}},
	{"pause-arguments-unchecked", "PauseTopic and ResumeTopic accept an empty topic, PausePartition and ResumePartition a partition out of range (doing nothing)", []string{"Pauser/RejectsBadArguments"}},
}

// pauseInWrapper reports whether the variant keeps pauses in the wrapper
// instead of the backend.
func (w *broken) pauseInWrapper() bool {
	switch w.variant {
	case "pause-topic-ignored", "pause-not-holding-key", "pause-counts-attempt", "pause-partition-ignored":
		return true
	}
	return false
}

func (w *broken) PauseTopic(ctx context.Context, topic string) error {
	ctx = w.ctx(ctx)
	switch {
	case w.variant == "pause-arguments-unchecked" && topic == "":
		return nil
	case w.pauseInWrapper() && topic != "":
		if _, err := w.Backend.Paused(ctx); err != nil {
			return err
		}
		w.op.mu.Lock()
		defer w.op.mu.Unlock()
		if _, ok := w.op.topics[topic]; !ok {
			w.op.topics[topic] = time.Now()
		}
		return nil
	case w.variant == "pause-since-reset":
		if err := w.Backend.ResumeTopic(ctx, topic); err != nil {
			return err
		}
	}
	return w.Backend.PauseTopic(ctx, topic)
}

func (w *broken) ResumeTopic(ctx context.Context, topic string) error {
	ctx = w.ctx(ctx)
	switch {
	case w.variant == "pause-arguments-unchecked" && topic == "":
		return nil
	case w.variant == "resume-ignored" && topic != "":
		_, err := w.Backend.Paused(ctx)
		return err
	case w.pauseInWrapper() && topic != "":
		w.op.mu.Lock()
		delete(w.op.topics, topic)
		w.op.mu.Unlock()
		_, err := w.Backend.Paused(ctx)
		return err
	case w.variant == "resume-reorders":
		if err := w.Backend.ResumeTopic(ctx, topic); err != nil {
			return err
		}
		return w.reappendTopic(ctx, topic)
	}
	return w.Backend.ResumeTopic(ctx, topic)
}

// reappendTopic is the resume-reorders variant: every pending entry of
// topic is cancelled and appended again, in ID order.
func (w *broken) reappendTopic(ctx context.Context, topic string) error {
	for _, state := range pendingStates {
		infos, err := w.Backend.Entries(ctx, state, outbox.ListFilter{Topic: topic}, "", 1<<30)
		if err != nil {
			return err
		}
		for _, info := range infos {
			if err := w.Backend.Cancel(ctx, info.ID); err != nil {
				return err
			}
			if err := w.Backend.Append(ctx, info.Entry); err != nil {
				return err
			}
		}
	}
	return nil
}

func (w *broken) PausePartition(ctx context.Context, partition int) error {
	ctx = w.ctx(ctx)
	inRange := partition >= 0 && partition < w.Partitions()
	switch {
	case w.variant == "pause-arguments-unchecked" && !inRange:
		return nil
	case w.pauseInWrapper() && inRange:
		w.op.mu.Lock()
		defer w.op.mu.Unlock()
		if _, ok := w.op.partitions[partition]; !ok {
			w.op.partitions[partition] = time.Now()
		}
		_, err := w.Backend.Paused(ctx)
		return err
	case w.variant == "pause-since-reset":
		if err := w.Backend.ResumePartition(ctx, partition); err != nil {
			return err
		}
	}
	return w.Backend.PausePartition(ctx, partition)
}

func (w *broken) ResumePartition(ctx context.Context, partition int) error {
	ctx = w.ctx(ctx)
	inRange := partition >= 0 && partition < w.Partitions()
	switch {
	case w.variant == "pause-arguments-unchecked" && !inRange:
		return nil
	case w.pauseInWrapper() && inRange:
		w.op.mu.Lock()
		delete(w.op.partitions, partition)
		w.op.mu.Unlock()
		_, err := w.Backend.Paused(ctx)
		return err
	}
	return w.Backend.ResumePartition(ctx, partition)
}

func (w *broken) Paused(ctx context.Context) (outbox.Paused, error) {
	got, err := w.Backend.Paused(w.ctx(ctx))
	if err != nil {
		return got, err
	}
	if w.pauseInWrapper() {
		w.op.mu.Lock()
		for _, tp := range slices.Sorted(maps.Keys(w.op.topics)) {
			got.Topics = append(got.Topics, outbox.PausedTopic{Topic: tp, Since: w.op.topics[tp]})
		}
		for _, p := range slices.Sorted(maps.Keys(w.op.partitions)) {
			got.Partitions = append(got.Partitions, outbox.PausedPartition{Partition: p, Since: w.op.partitions[p]})
		}
		w.op.mu.Unlock()
	}
	if w.variant == "paused-unsorted" {
		slices.Reverse(got.Topics)
		slices.Reverse(got.Partitions)
	}
	return got, nil
}

// beforeFetchOperate is the fetch of the pause-partition-unfenced variant:
// a paused partition returns nothing before the lease is checked.
func (w *broken) beforeFetchOperate(ctx context.Context, lease outbox.Lease) bool {
	if w.variant != "pause-partition-unfenced" {
		return false
	}
	p, err := w.Backend.Paused(ctx)
	return err == nil && slices.ContainsFunc(p.Partitions, func(pp outbox.PausedPartition) bool { return pp.Partition == lease.Partition })
}

// fetchIgnoringPause is the FetchBatch of the fetch-batch-ignores-pause
// variant: it lifts every pause for the fetch and puts them back after it
// (with a new Since, which the cases of this variant do not read).
func (w *broken) fetchIgnoringPause(ctx context.Context, lease outbox.Lease, limit int) (outbox.Batch, error) {
	p, err := w.Backend.Paused(ctx)
	if err != nil {
		return outbox.Batch{}, err
	}
	for _, pt := range p.Topics {
		_ = w.Backend.ResumeTopic(ctx, pt.Topic)
	}
	for _, pp := range p.Partitions {
		_ = w.Backend.ResumePartition(ctx, pp.Partition)
	}
	b, err := w.fetchBatch(ctx, lease, limit)
	for _, pt := range p.Topics {
		_ = w.Backend.PauseTopic(ctx, pt.Topic)
	}
	for _, pp := range p.Partitions {
		_ = w.Backend.PausePartition(ctx, pp.Partition)
	}
	return b, err
}

// pausedFetch is the fetch of the variants that keep pauses in the
// wrapper: entries of a paused topic are released (pause-not-holding-key)
// or failed (pause-counts-attempt) and left out.
func (w *broken) pausedFetch(ctx context.Context, lease outbox.Lease, batch []outbox.Entry) ([]outbox.Entry, error) {
	w.op.mu.Lock()
	topics := maps.Clone(w.op.topics)
	w.op.mu.Unlock()
	var out []outbox.Entry
	var held []string
	var failures []outbox.Failure
	for _, e := range batch {
		if _, paused := topics[e.Topic]; !paused {
			out = append(out, e)
			continue
		}
		switch w.variant {
		case "pause-not-holding-key":
			held = append(held, e.ID)
		case "pause-counts-attempt":
			failures = append(failures, outbox.Failure{ID: e.ID, Error: fmt.Sprintf("topic %q is paused", e.Topic)})
		default:
			out = append(out, e)
		}
	}
	if len(failures) > 0 {
		if err := w.Backend.MarkFailed(ctx, lease, failures); err != nil {
			return nil, err
		}
	}
	return out, w.releaseHeld(ctx, lease, held)
}
